// What the training benchmarks (cohort-ddp-bench, cohort-zero-bench) report alike: medians of
// the timed windows and peak RSS. Their ranks are started by a launcher (cohortrun) and join
// through cohort::init().
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

namespace bench_stats {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Peak resident set of this process so far, KiB (Linux reports ru_maxrss in KiB).
inline int64_t peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

}  // namespace bench_stats
