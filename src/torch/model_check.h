// The construction-time check of DistributedDataParallel that every rank wraps the same model.
#pragma once

#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort {

// Collective. Returns when every rank passed the same `entries` (one line per parameter, e.g.
// "fc1.weight float32 [1024, 784]"); otherwise throws InvalidArgument on every rank, naming
// the first entry where some rank differs from rank 0, and both ranks.
// `site` names the caller in the errors of its collectives (CallSite); `who` opens the message.
void check_same_on_all_ranks(Group& group, const std::vector<std::string>& entries,
                             const std::string& what, CallSite site,
                             const std::string& who = "DistributedDataParallel");

}  // namespace cohort
