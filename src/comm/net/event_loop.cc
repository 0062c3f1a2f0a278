#include "net/event_loop.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"

namespace cohort::net {

// Note [Event loop]
// One thread waits in epoll_wait on every registered descriptor (level-triggered) and calls
// the handler of each that is ready, one at a time, without holding the loop's lock: a handler
// may take its own locks, call add/modify/remove, and must never block (its sockets are
// non-blocking; it reads and writes what is there and returns). A handler that has much to do
// (a large message) does a bounded piece and returns; level triggering brings it back after
// the other descriptors had their turn. remove() from another thread waits until the handler
// is not running, so that its owner may then free what the handler touches; such a caller must
// not hold a lock the handler takes. Deadlines are not the loop's business: whoever waits for
// a result waits with its own deadline, and the loop never sleeps on a timer.
//
// TCP uses two loops per process (EventLoop::shared): one reads every connection (matching,
// landing and reducing incoming frames), one writes what callers' threads could not write at
// once. With one loop for both, a large exchange (each rank sends and receives 64 MiB) ran its
// reads and writes one after the other on one thread, and 2-rank allreduce bandwidth at 64 MiB
// fell by about a quarter against a reader and a sender per connection; with two, reading and
// writing overlap as they did then, and the count stays fixed at two.

namespace {

[[noreturn]] void fail_errno(const char* what) {
  throw Error(std::string("event loop: ") + what + " failed: " + std::strerror(errno));
}

}  // namespace

EventLoop::EventLoop() {
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) fail_errno("epoll_create1");
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    ::close(epoll_fd_);
    fail_errno("eventfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0) {
    ::close(wake_fd_);
    ::close(epoll_fd_);
    fail_errno("epoll_ctl");
  }
  thread_ = std::thread([this] { run(); });
  std::lock_guard<std::mutex> lock(mutex_);
  thread_id_ = thread_.get_id();
}

EventLoop::~EventLoop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake();
  if (thread_.joinable()) {
    if (in_loop_thread()) {
      thread_.detach();  // the last owner let go inside a handler: the thread ends on its own
    } else {
      thread_.join();
    }
  }
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

std::shared_ptr<EventLoop> EventLoop::shared(Slot slot) {
  static std::mutex mutex;
  static std::weak_ptr<EventLoop> current[kSlots];
  static pid_t owner[kSlots] = {};
  std::lock_guard<std::mutex> lock(mutex);
  if (owner[slot] != ::getpid()) {
    // A new process, or a forked child: the parent's loop has no thread here. Forget it (the
    // weak reference keeps nothing alive) and start afresh.
    current[slot].reset();
    owner[slot] = ::getpid();
  }
  auto loop = current[slot].lock();
  if (!loop) {
    loop = std::make_shared<EventLoop>();
    current[slot] = loop;
  }
  return loop;
}

uint64_t EventLoop::add(int fd, uint32_t events, Handler handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) fail_errno("epoll_ctl(ADD)");
  entries_[id] = Entry{fd, std::make_shared<Handler>(std::move(handler))};
  return id;
}

void EventLoop::modify(uint64_t id, uint32_t events) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;  // removed meanwhile: nothing to watch
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, it->second.fd, &ev) != 0) fail_errno("epoll_ctl(MOD)");
}

void EventLoop::remove(uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = entries_.find(id);
  if (it != entries_.end()) {
    // Owners remove before they close: a closed number may already name another descriptor.
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->second.fd, nullptr);
    entries_.erase(it);
  }
  if (in_loop_thread()) return;
  idle_.wait(lock, [&] { return running_ != id; });
}

void EventLoop::wake() noexcept {
  const uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void EventLoop::run() noexcept {
  constexpr int kMaxEvents = 64;
  epoll_event events[kMaxEvents];
  for (;;) {
    const int n = ::epoll_wait(epoll_fd_, events, kMaxEvents, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      COHORT_LOG(kError, "event loop: epoll_wait failed: ", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == 0) {
        uint64_t count = 0;
        while (::read(wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
        }
        continue;
      }
      dispatch(events[i].data.u64, events[i].events);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_) return;
  }
}

void EventLoop::dispatch(uint64_t id, uint32_t events) {
  std::shared_ptr<Handler> handler;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;  // removed after epoll_wait reported it
    handler = it->second.handler;
    running_ = id;
  }
  try {
    (*handler)(events);
  } catch (const std::exception& e) {
    // Handlers keep their errors to themselves (they fail their own requests); one that did
    // not is a bug, but must not take every other descriptor's loop down with it.
    COHORT_LOG(kError, "event loop: a handler threw: ", e.what());
  } catch (...) {
    COHORT_LOG(kError, "event loop: a handler threw");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = 0;
  }
  idle_.notify_all();
}

}  // namespace cohort::net
