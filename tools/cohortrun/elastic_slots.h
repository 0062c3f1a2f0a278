// The node's ranks in elastic mode (--min-ranks; docs/launch.md, "Elastic mode"). A rank that
// fails does not stop the others: its slot (its RANK, LOCAL_RANK) is started again alone, up
// to --max-restarts times, and the new process joins the running job as a new member
// (cohort::init_elastic). A slot past its restarts is given up, and so is one that fails once
// the job is finishing (a rank has exited 0: the others are done or about to be, and a new
// member would find the job finished). The job's ranks have ended when every slot's latest
// process has. A stop signal sent to cohortrun stops every rank as in the other mode.
#pragma once

#include <optional>
#include <string>
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
  std::vector<RankFailure> given_up;  // what gave each slot up, in the order it was
  int stop_signal = 0;                // cohortrun was interrupted by it
  std::vector<int> stopped;           // slots cohortrun stopped on that signal or on a lost store
  std::string store_lost;  // several nodes: node 0's store went away (why), so the ranks were
                           // stopped: nothing of the job can go on without it
};

// What the slots learn from the rest of the job while they run (several nodes: ElasticNodes,
// elastic_nodes.h). watch() is called every pump of the slots' loop and must not block long.
class JobWatch {
 public:
  virtual ~JobWatch() = default;
  virtual void watch() = 0;
  // As watch(), at once: before a failed slot is restarted (it may have failed because node
  // 0's store is gone).
  virtual void watch_now() = 0;
  // The job's members marked it finished: a slot that fails now is not restarted.
  virtual bool job_finished() const = 0;
  // Non-empty once node 0's store is lost: why.
  virtual std::string store_lost() const = 0;
};

// `watch` may be null (one node).
ElasticResult run_elastic_slots(const LaunchOptions& options, const RankPlacement& placement,
                                JobWatch* watch = nullptr);

}  // namespace cohort::run
