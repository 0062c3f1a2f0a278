// What the training benchmarks (cohort-ddp-bench, cohort-zero-bench) report alike: medians of
// the timed windows and peak RSS. Their ranks are started by a launcher (cohortrun) and join
// through cohort::init().
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace bench_stats {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// The timed part of a run: `windows` windows of `steps` calls of step() each; settle() ends
// each window before the clock stops (a GPU's synchronize). Returns each window's seconds per
// step (every rank times its own).
inline std::vector<double> timed_windows(
    int windows, int steps, const std::function<void()>& step,
    const std::function<void()>& settle = [] {}) {
  std::vector<double> per_step;
  for (int w = 0; w < windows; ++w) {
    const auto start = Clock::now();
    for (int i = 0; i < steps; ++i) step();
    settle();
    per_step.push_back(std::chrono::duration<double>(Clock::now() - start).count() / steps);
  }
  return per_step;
}

// Peak resident set of this process so far, KiB (Linux reports ru_maxrss in KiB).
inline int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace bench_stats
