// Whether every rank of a group holds the same description of something that must be the same
// everywhere (the model, the training configuration): one line per item, e.g.
// "fc1.weight float32 [1024, 784]" or "--precision=bf16".
//
//   const std::string difference =
//       cohort::first_disagreement(*group, lines, "setting", cohort::CollectiveOptions{});
//   if (!difference.empty()) throw cohort::ConfigError("my_trainer: " + difference);
#pragma once

#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort {

// Collective: every rank calls it with its own lines. "" when every rank passed the same lines;
// else, on every rank, the first line where some rank differs from rank 0, with both ranks and
// both values ("setting #3 is 'lr=0.1' on rank 0 but 'lr=0.2' on rank 1"), `what` naming a
// line. One allgather of a hash when they agree; two more to say where they do not.
std::string first_disagreement(Group& group, const std::vector<std::string>& lines,
                               const std::string& what, const CollectiveOptions& options = {});

}  // namespace cohort
