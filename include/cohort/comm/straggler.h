// Stragglers: which rank of a job is slow, and a rank made slow on purpose (docs/async.md,
// "Stragglers").
//
//   cohort::StepTimes times;                        // per rank
//   times.add(ms_of_forward_and_backward);          // every step
//   auto report = times.report(*group);             // collective, e.g. once an epoch
//   if (group->rank() == 0) std::puts(report.describe().c_str());
//     // "compute ms per step by rank: 20.1 19.8 41.0 20.3; slowest: rank 2, 2.04x the median"
#pragma once

#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort {

class Group;

class StepTimes {
 public:
  struct Report {
    std::vector<double> mean_ms;  // per rank: the mean of what it added since the last report
    int slowest_rank = -1;
    double slowest_ratio = 0;  // the slowest rank's mean over the median of the means
    std::string describe() const;
  };

  // One step's time on this rank (what it spent computing: the part a straggler stretches).
  void add(double ms);
  // Collective over `group`: every rank's mean, and the slowest. Starts a new period.
  Report report(Group& group);
  // The same from means already gathered.
  static Report of(std::vector<double> mean_ms);

 private:
  double sum_ms_ = 0;
  int64_t count_ = 0;
};

// A rank made slow on purpose, for tests and benchmarks only: COHORT_SLOW_RANKS="R:F[,R:F...]"
// makes rank R take F times as long to compute (F >= 1). after_compute() sleeps (F - 1) times
// the compute it is given, so the rank is slower without taking CPU from the others, as a rank
// on a loaded host or behind a slow link is.
class SlowDown {
 public:
  // Reads COHORT_SLOW_RANKS; throws ConfigError, naming the variable, for a malformed value.
  static SlowDown from_env(int rank);
  explicit SlowDown(double factor = 1.0);
  double factor() const { return factor_; }
  void after_compute(Clock::duration compute) const;

 private:
  double factor_;
};

}  // namespace cohort
