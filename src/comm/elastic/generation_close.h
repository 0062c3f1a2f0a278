// The closer's decision for one generation (Note [Elastic rendezvous] in
// generation_rendezvous.h), as a pure function of what has arrived so far, so that it can be
// unit-tested without a store.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "generation_rendezvous.h"

namespace cohort::elastic {

// What the closer knows of the generation before: its size, fingerprint, and the newest
// committed step a member of it held (its rank 0's; -1: none yet, a job's start).
struct PreviousGeneration {
  int size = 0;
  std::string fingerprint;
  int64_t committed_step = -1;
};

struct CloseInput {
  uint64_t generation = 0;
  std::optional<PreviousGeneration> previous;    // absent for the first generation
  std::vector<std::optional<Arrival>> arrivals;  // by arrival index; empty: record never came
  bool settled = false;      // `settle` has passed since the first previous member arrived
  bool out_of_time = false;  // join_timeout has passed
  bool finished = false;     // the job's members marked it finished (ElasticGroup::finish)
};

struct CloseDecision {
  enum class Kind { kWait, kClose, kFail };
  Kind kind = Kind::kWait;
  std::vector<size_t> admitted;           // arrival indices, by new rank
  std::map<size_t, std::string> refused;  // arrival index -> why
  std::vector<int> left;                  // previous ranks not admitted
  std::string fingerprint;                // the generation's
  std::string error;                      // kFail: why no generation formed
  // kClose: no admitted member holds the job's state, which was at this committed step
  // (ElasticOptions::resume_lost_state); -1: they hold it.
  int64_t lost_step = -1;
};

CloseDecision decide_close(const CloseInput& input, const ElasticOptions& options);

// Whether some previous member has arrived (the settle window starts then).
bool previous_member_arrived(const CloseInput& input);

}  // namespace cohort::elastic
