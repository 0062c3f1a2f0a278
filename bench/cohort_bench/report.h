// What rank 0 prints: an nccl-tests style table on stdout and, with --json, the same rows and
// the run's parameters as JSON (docs/bench.md describes both).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_config.h"

namespace cohort::bench {

// One measured size.
struct Row {
  size_t bytes = 0;
  size_t count = 0;
  Algorithm algorithm = Algorithm::kAuto;  // what the group actually ran
  int iters = 0;
  double time_us = 0;      // median over trials of the per-op time (max over ranks)
  double time_us_min = 0;  // fastest and slowest trial
  double time_us_max = 0;
  double algbw_gbs = 0;    // bytes / time_us, in 1e9 bytes per second
  double busbw_gbs = 0;    // algbw * busbw_factor
  uint64_t wrong = 0;      // wrong elements, summed over ranks
};

class Reporter {
 public:
  Reporter(const BenchConfig& config, std::FILE* out);

  // `algorithm`: what was asked for (--algo or COHORT_ALGO); `notes` go above the columns.
  void header(Algorithm algorithm, const std::vector<std::string>& notes);
  // A comment line ("# ..."), e.g. a fallback of the algorithm or a skipped size.
  void note(const std::string& text);
  void row(const Row& row);
  void footer(uint64_t wrong_total);
  // Writes --json when it was given; `error` is empty unless the run failed part-way, in which
  // case the rows measured so far are written with it. Returns false (after printing why)
  // when the file cannot be written.
  bool write_json(const std::string& error) const;

 private:
  const BenchConfig& config_;
  std::FILE* out_;
  Algorithm algorithm_ = Algorithm::kAuto;
  std::vector<Row> rows_;
  std::vector<std::string> notes_;
  uint64_t wrong_total_ = 0;
};

// Checks early that --json can be written, so a long run does not fail at its end.
void check_json_writable(const std::string& path);

}  // namespace cohort::bench
