#include "checkpoint/background_save.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <utility>

namespace cohort::detail {

// What the thread and the caller share: the thread may outlive the BackgroundSave.
struct BackgroundSave::Shared {
  mutable std::mutex mutex;
  mutable std::condition_variable changed;
  Clock::time_point start = Clock::now();
  Clock::time_point staged_at;
  Clock::time_point finished_at;
  bool staged = false;
  bool finished = false;
  std::exception_ptr error;
  pid_t thread_id = 0;          // the job's thread, once it runs
  bool idle = false;            // it runs at SCHED_IDLE
  bool raise_requested = false;  // raise_priority() was called (maybe before the thread ran)

  void mark_staged() {
    std::lock_guard<std::mutex> lock(mutex);
    if (staged) return;
    staged = true;
    staged_at = Clock::now();
    changed.notify_all();
  }

  void mark_finished(std::exception_ptr thrown) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!staged) {
      staged = true;
      staged_at = Clock::now();
    }
    finished = true;
    finished_at = Clock::now();
    error = std::move(thrown);
    changed.notify_all();
  }

  template <typename Done>
  bool wait(Clock::time_point deadline, Done done) const {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_until(lock, deadline, done);
  }
};

namespace {

// Linux applies a scheduling policy set for a thread id to that thread only (0: the calling
// one). Where it cannot be set (another kernel), the thread keeps the priority it has.
bool set_policy(pid_t thread, int policy) {
  sched_param parameters{};
  parameters.sched_priority = 0;
  return ::sched_setscheduler(thread, policy, &parameters) == 0;
}

}  // namespace

BackgroundSave::BackgroundSave(Job job, bool staged, bool idle_priority)
    : shared_(std::make_shared<Shared>()) {
  if (staged) shared_->mark_staged();
  thread_ = std::thread([shared = shared_, job = std::move(job), idle_priority] {
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->thread_id = static_cast<pid_t>(::syscall(SYS_gettid));
      shared->idle = idle_priority && !shared->raise_requested && set_policy(0, SCHED_IDLE);
    }
    std::exception_ptr thrown;
    try {
      job([&shared] { shared->mark_staged(); });
    } catch (...) {
      thrown = std::current_exception();
    }
    shared->mark_finished(std::move(thrown));
  });
}

BackgroundSave::~BackgroundSave() {
  if (finished()) {
    thread_.join();
  } else {
    thread_.detach();
  }
}

void BackgroundSave::raise_priority() {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  shared_->raise_requested = true;
  if (!shared_->idle || shared_->finished) return;
  shared_->idle = !set_policy(shared_->thread_id, SCHED_OTHER);
}

bool BackgroundSave::wait_staged(Clock::time_point deadline) const {
  return shared_->wait(deadline, [this] { return shared_->staged; });
}

bool BackgroundSave::wait_finished(Clock::time_point deadline) const {
  return shared_->wait(deadline, [this] { return shared_->finished; });
}

bool BackgroundSave::staged() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->staged;
}

bool BackgroundSave::finished() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->finished;
}

std::exception_ptr BackgroundSave::error() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->error;
}

double BackgroundSave::staged_ms() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return std::chrono::duration<double, std::milli>(shared_->staged_at - shared_->start).count();
}

double BackgroundSave::finished_ms() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return std::chrono::duration<double, std::milli>(shared_->finished_at - shared_->start).count();
}

}  // namespace cohort::detail
