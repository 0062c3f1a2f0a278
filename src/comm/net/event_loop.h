// EventLoop: one thread that waits on many descriptors at once (epoll) and calls a handler
// when one is readable or writable. Every TCP connection of every group of a process shares
// the same two loops (EventLoop::shared(): one reads, one writes), so the threads a rank runs
// do not grow with its peers or groups. Note [Event loop] says what a handler may do.
#pragma once

#include <sys/epoll.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace cohort::net {

class EventLoop {
 public:
  // Called on the loop thread with the epoll events that fired (EPOLLIN, EPOLLOUT, EPOLLHUP,
  // EPOLLERR).
  using Handler = std::function<void(uint32_t events)>;

  EventLoop();   // starts the thread
  ~EventLoop();  // stops and joins it; every descriptor must have been removed
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // The process's loops for TCP connections, one per slot, each made on first use and kept
  // while anyone holds it. A forked child gets loops of its own (the parent's threads do not
  // exist there). Note [Event loop] says why reading and writing have a loop each.
  enum Slot { kIncoming = 0, kOutgoing = 1, kSlots = 2 };
  static std::shared_ptr<EventLoop> shared(Slot slot);

  // Watches `fd` for `events` (EPOLLIN, EPOLLOUT; level-triggered). Returns the id that
  // modify() and remove() take.
  uint64_t add(int fd, uint32_t events, Handler handler);
  // Changes what `fd` is watched for; 0 watches nothing but hang-ups and errors. Any thread.
  void modify(uint64_t id, uint32_t events);
  // Stops watching. Once it returns, the handler is not running and never runs again, unless
  // it is called from that handler itself (then it returns at once).
  void remove(uint64_t id);

  bool in_loop_thread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  struct Entry {
    int fd = -1;
    std::shared_ptr<Handler> handler;
  };
  void run() noexcept;
  void dispatch(uint64_t id, uint32_t events);
  void wake() noexcept;

  int epoll_fd_ = -1;
  int wake_fd_ = -1;              // an eventfd: stop() writes it so that epoll_wait returns
  std::mutex mutex_;              // guards everything below
  std::condition_variable idle_;  // a handler returned
  std::unordered_map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 1;  // 0 is the wake descriptor
  uint64_t running_ = 0;  // the id whose handler runs now, 0 for none
  bool stop_ = false;
  std::thread thread_;
  std::thread::id thread_id_;
};

}  // namespace cohort::net
