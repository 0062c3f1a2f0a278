// The node's ranks in elastic mode (--min-ranks; docs/launch.md, "Elastic mode"). A rank that
// fails does not stop the others: its slot (its RANK, LOCAL_RANK) is started again alone, up
// to --max-restarts times, and the new process joins the running job as a new member
// (cohort::init_elastic). A slot past its restarts is given up, and so is one that fails once
// the job is finishing (a rank has exited 0: the others are done or about to be, and a new
// member would find the job finished). The job's ranks have ended when every slot's latest
// process has. A stop signal sent to cohortrun stops every rank as in the other mode.
#pragma once

#include <optional>
#include <vector>

#include "launch_options.h"
#include "local_attempt.h"
#include "rank_environment.h"

namespace cohort::run {

struct SlotOutcome {
  int rank = 0;
  int restarts = 0;
  bool succeeded = false;             // its latest process exited 0
  std::vector<RankFailure> failures;  // each of its processes that failed, first first
};

struct ElasticResult {
  std::vector<SlotOutcome> slots;  // by local rank
  std::optional<RankFailure> first_failure;
  int stop_signal = 0;       // cohortrun was interrupted by it
  std::vector<int> stopped;  // ranks cohortrun stopped on that signal
};

ElasticResult run_elastic_slots(const LaunchOptions& options, const RankPlacement& placement);

}  // namespace cohort::run
