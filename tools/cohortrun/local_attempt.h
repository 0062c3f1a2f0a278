// One attempt of the job on this node: starts the node's ranks, relays their output, and
// watches them until all have exited. The first rank to fail (non-zero exit or a signal)
// makes cohortrun stop the others: SIGTERM to each rank's process group, then SIGKILL after
// --stop-timeout. A stop signal sent to cohortrun is forwarded the same way, and on several
// nodes a failure another node reports stops this node's ranks too.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch_options.h"
#include "node_rendezvous.h"
#include "rank_environment.h"

namespace cohort::run {

struct RankFailure {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  int exit_code = 0;    // what a shell would report: the code, or 128 + signal
  bool exited = false;  // it ended by exiting (with exit_code), not by a signal or a stop
  std::string what;     // "exited with code 3", "was killed by signal 9 (Killed)"
  std::vector<std::string> last_lines;
  // Elastic mode: `rank` is the launch slot, not the rank in the job (which is whatever the
  // generation gives the process), and this is which of the slot's processes failed
  // (COHORT_ELASTIC_RESTART).
  std::optional<int> slot_restart;
};

// "rank 2", or in elastic mode "slot 2".
std::string name_of(const RankFailure& failure);

struct AttemptResult {
  enum class Outcome {
    kSucceeded,        // every rank exited 0
    kRanksFailed,      // `failures` says which, first first
    kOtherNodeFailed,  // `cause` is that node's report
    kInterrupted,      // cohortrun got `stop_signal`
    kStoreLost,        // node 0's store went away (`cause`)
  };
  Outcome outcome = Outcome::kSucceeded;
  std::vector<RankFailure> failures;
  std::string cause;
  int stop_signal = 0;
  std::vector<int> stopped;  // ranks cohortrun stopped (they had not failed themselves)
};

AttemptResult run_local_attempt(const LaunchOptions& options, const RankPlacement& placement,
                                NodeRendezvous& rendezvous);

}  // namespace cohort::run
