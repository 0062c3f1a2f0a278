// Which algorithm runs a collective: the caller's override, else the group's default
// (COHORT_ALGO), else the automatic choice: for allreduce the lowest time the cost model
// predicts for the message size and the group's shape, for the others shared memory inside
// one node and rules by size beyond (docs/algorithms.md). A request for a variant a
// collective does not have, or that cannot run on the group, falls back to the automatic
// choice. kEngine (the backend engine's own collective) is only ever chosen on request.
#pragma once

#include <cstddef>

#include "cohort/comm/options.h"
#include "cohort/comm/cost_model.h"

namespace cohort {

// `requested` is the per-call override or the group default (kAuto when neither is set).
// Every rank must pass the same arguments (the group's shape and model are agreed at creation).
Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& shape, const CostModel& model);

}  // namespace cohort
