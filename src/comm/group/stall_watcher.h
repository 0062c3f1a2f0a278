// One thread per process that wakes every group's stall reporter on its period (Note [Stall
// reports], Note [One stall watcher]).
//
// Note [One stall watcher]
// Every group with a store reports its stalls (stall_report.h), and a process may hold many
// groups: the parameter server makes one per (server, worker) pair, 63 of them on a server of
// 63 workers. A thread per group made such a server run about 190 threads. So one thread per
// process serves every reporter: each registers a periodic tick with a deadline, and the
// watcher sleeps until the earliest deadline, runs the ticks that are due one after another,
// and sets their next deadlines. A tick is a few atomic loads, and a store write only when a
// collective has been stuck for a whole period, so one thread keeps up with many groups; a tick
// that waits on a slow store delays the others' reports by as much, which only makes a
// timeout's list of missing ranks later, never wrong.
// The watcher is shared, not global: StallWatcher::shared() hands out shared ownership, and the
// function-local static keeps only a weak reference (the one piece of process-wide state, as
// for the TCP event loops: Note [Event loop]). The first group that needs it starts the thread,
// and the last one to let go stops and joins it, so a program without groups runs no watcher,
// and nothing outlives main that a static destructor would have to stop in the right order.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "cohort/core/deadline.h"

namespace cohort {

class StallWatcher {
 public:
  // The process's watcher, started by its first caller (a forked child starts its own).
  static std::shared_ptr<StallWatcher> shared();

  StallWatcher();
  ~StallWatcher();
  StallWatcher(const StallWatcher&) = delete;
  StallWatcher& operator=(const StallWatcher&) = delete;

  // Runs `tick` on the watcher's thread every `period`, the first time one period from now.
  uint64_t add(Milliseconds period, std::function<void()> tick);
  // After it returns, the tick is not running and never runs again. Not from inside a tick.
  void remove(uint64_t id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    Milliseconds period;
    Clock::time_point due;
    std::function<void()> tick;
  };

  void loop();
  // The entry due first, or entries_.end().
  std::map<uint64_t, Entry>::iterator earliest();

  std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_;
  std::map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 1;
  uint64_t running_ = 0;  // the entry whose tick runs now, 0 for none
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cohort
