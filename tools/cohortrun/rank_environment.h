// The environment a rank starts with: cohortrun's own, with the launcher variables that
// cohort::init() reads (torchrun's names, so torchrun-style programs run too) set for this
// rank and attempt (docs/launch.md, "What cohortrun sets").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch_options.h"

namespace cohort::run {

struct RankPlacement {
  int local_rank = 0;
  int attempt = 0;  // COHORT_RESTART_COUNT
  uint16_t store_port = 0;
  std::string token;        // COHORT_JOB_TOKEN
  std::string job_id;       // COHORT_JOB_ID: the same in every attempt (a restart is the same job)
  int elastic_restart = 0;  // elastic mode: COHORT_ELASTIC_RESTART, this slot's restarts so far
};

int global_rank(const LaunchOptions& options, int local_rank);

std::vector<std::string> rank_environment(const LaunchOptions& options,
                                          const RankPlacement& placement);

}  // namespace cohort::run
