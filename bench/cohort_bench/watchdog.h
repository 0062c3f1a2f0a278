// The last line of defence against a hang: every collective in cohort has a deadline, but the
// benchmark must end even if one of them does not hold (a bug being measured is still a bug
// the tool has to survive). Ranks tick their slot as they go; when no slot of this process has
// moved for `window`, the watchdog prints where each rank was and ends the process with
// kExitFailure. The parent of local ranks notices the exit and ends the others.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "cohort/core/deadline.h"

namespace cohort::bench {

class Watchdog {
 public:
  // The progress of one rank, written by that rank's thread only.
  class Slot {
   public:
    // Called after every collective: a relaxed store, cheap enough for the timed loop.
    void tick() noexcept {
      ticks_.store(ticks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    // Names what the rank does next (a string literal), for the message if it hangs there.
    void enter(const char* phase, size_t bytes) noexcept;

   private:
    friend class Watchdog;
    // Own cache line per slot, so ranks that are threads do not slow each other down.
    alignas(64) std::atomic<uint64_t> ticks_{0};
    std::atomic<const char*> phase_{"starting"};
    std::atomic<size_t> bytes_{0};
  };

  // `slots` ranks live in this process, numbered from `first_rank` in messages.
  Watchdog(int slots, int first_rank, Milliseconds window);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  Slot& slot(int index) { return slots_[static_cast<size_t>(index)]; }

 private:
  uint64_t total_ticks() const;
  [[noreturn]] void give_up() const;
  void run();

  const int num_slots_;
  const int first_rank_;
  const Milliseconds window_;
  std::unique_ptr<Slot[]> slots_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cohort::bench
