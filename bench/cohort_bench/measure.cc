#include "measure.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "cases.h"

namespace cohort::bench {

namespace {

double max_over_ranks(Group& group, double value) {
  CollectiveOptions options;
  options.op = ReduceOp::kMax;
  group.allreduce(make_buffer(&value, 1), options);
  return value;
}

uint64_t sum_over_ranks(Group& group, uint64_t value) {
  int64_t v = static_cast<int64_t>(value);
  group.allreduce(make_buffer(&v, 1));
  return static_cast<uint64_t>(v);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// Seconds per op of one timed loop on this rank.
double timed_loop(Group& group, Case& c, int iters, Watchdog::Slot& progress) {
  // Fresh inputs, so that every trial computes the same thing (repeated sums grow, and some
  // dtypes reach inf) and no trial pays for different values.
  c.fill();
  group.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    c.run();
    progress.tick();
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / iters;
}

Row measure(Group& group, Case& c, const BenchConfig& config, Watchdog::Slot& progress) {
  progress.enter("warm-up", c.bytes());
  c.fill();
  for (int i = 0; i < config.warmup; ++i) {
    c.run();
    progress.tick();
  }
  progress.enter("timed loop", c.bytes());
  std::vector<double> seconds;
  for (int t = 0; t < config.trials; ++t) {
    seconds.push_back(max_over_ranks(group, timed_loop(group, c, config.iters, progress)));
  }
  progress.enter("correctness check", c.bytes());
  c.fill();
  c.run();
  Row row;
  row.wrong = sum_over_ranks(group, c.count_wrong());
  row.bytes = c.bytes();
  row.count = c.count();
  row.algorithm = effective_algorithm(group, config, c.bytes());
  row.iters = config.iters;
  const double time = median(seconds);
  row.time_us = time * 1e6;
  row.time_us_min = *std::min_element(seconds.begin(), seconds.end()) * 1e6;
  row.time_us_max = *std::max_element(seconds.begin(), seconds.end()) * 1e6;
  row.algbw_gbs = time > 0 ? static_cast<double>(c.bytes()) / time / 1e9 : 0;
  row.busbw_gbs = row.algbw_gbs * busbw_factor(config.collective, group.size());
  return row;
}

// Says so when --algo names a variant this collective does not have.
std::vector<std::string> fallback_notes(Group& group, const BenchConfig& config) {
  const Algorithm requested = requested_algorithm(group, config);
  if (requested == Algorithm::kAuto) return {};
  if (effective_algorithm(group, config, config.max_bytes) == requested) return {};
  return {std::string(collective_name(config.collective)) + " has no " +
          algorithm_name(requested) +
          " variant: cohort chooses automatically (per-size algo in --json)"};
}

}  // namespace

uint64_t run_benchmark(Group& group, const BenchConfig& config, Reporter* reporter,
                       Watchdog::Slot& progress) {
  if (reporter) {
    reporter->header(requested_algorithm(group, config), fallback_notes(group, config));
  }
  uint64_t wrong_total = 0;
  for (const size_t bytes : size_ladder(config)) {
    progress.enter("allocating buffers", bytes);
    const auto c = make_case(group, config, bytes);
    if (!c) {
      if (reporter) {
        reporter->note("size " + std::to_string(bytes) + " skipped: less than one " +
                       dtype_name(config.dtype) + " element per rank");
      }
      continue;
    }
    const Row row = measure(group, *c, config, progress);
    wrong_total += row.wrong;
    if (reporter) reporter->row(row);
  }
  if (reporter) reporter->footer(wrong_total);
  return wrong_total;
}

}  // namespace cohort::bench
