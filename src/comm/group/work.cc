#include "cohort/comm/work.h"

#include "cohort/core/error.h"

namespace cohort {

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void Work::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

void Work::wait(Milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw TimeoutError("Work::wait: " + description_ + " did not finish within " +
                       std::to_string(timeout.count()) + " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

Clock::time_point Work::started_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return started_at_;
}

Clock::time_point Work::finished_at() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_at_;
}

void Work::mark_started() {
  std::lock_guard<std::mutex> lock(mutex_);
  started_at_ = Clock::now();
}

void Work::mark_done(std::exception_ptr error) {
  const Clock::time_point now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_at_ = now;
    done_ = true;
    error_ = error;
  }
  done_cv_.notify_all();
}

}  // namespace cohort
