#include "watchdog.h"

#include <cstdio>
#include <cstdlib>

#include "bench_config.h"

namespace cohort::bench {

void Watchdog::Slot::enter(const char* phase, size_t bytes) noexcept {
  phase_.store(phase, std::memory_order_relaxed);
  bytes_.store(bytes, std::memory_order_relaxed);
  tick();
}

Watchdog::Watchdog(int slots, int first_rank, Milliseconds window)
    : num_slots_(slots),
      first_rank_(first_rank),
      window_(window),
      slots_(std::make_unique<Slot[]>(static_cast<size_t>(slots))) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  thread_.join();
}

uint64_t Watchdog::total_ticks() const {
  uint64_t total = 0;
  for (int i = 0; i < num_slots_; ++i) total += slots_[i].ticks_.load(std::memory_order_relaxed);
  return total;
}

void Watchdog::give_up() const {
  std::fprintf(stderr, "cohort-bench: no progress for %.1f s; giving up. Where the ranks were:\n",
               static_cast<double>(window_.count()) / 1000);
  for (int i = 0; i < num_slots_; ++i) {
    std::fprintf(stderr, "  rank %d: %s (%zu B)\n", first_rank_ + i,
                 slots_[i].phase_.load(std::memory_order_relaxed),
                 slots_[i].bytes_.load(std::memory_order_relaxed));
  }
  std::fflush(stderr);
  // A stuck thread cannot be joined or cancelled: leave without running destructors.
  std::_Exit(kExitFailure);
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t seen = total_ticks();
  auto last_change = Clock::now();
  while (!stop_cv_.wait_for(lock, Milliseconds(250), [this] { return stop_; })) {
    const uint64_t now_ticks = total_ticks();
    if (now_ticks != seen) {
      seen = now_ticks;
      last_change = Clock::now();
    } else if (Clock::now() - last_change > window_) {
      give_up();
    }
  }
}

}  // namespace cohort::bench
