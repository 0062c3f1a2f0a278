// How an example divides its work among the ranks of its job.
#pragma once

#include <cstdint>

#include "cohort/comm/group.h"

namespace cohort_examples {

// The part of the global batch each rank runs. Throws cohort::InvalidArgument when the batch
// does not split evenly: every rank must run the same number of samples, so that W ranks make
// the same optimization steps as one process on the whole batch.
int64_t per_rank_batch(int64_t global_batch, const cohort::Group& group);

// `requested` torch threads when positive; else this machine's cores shared among the ranks
// on it (more threads than cores make every rank wait for the slowest).
int threads_per_rank(int requested, const cohort::Group& group);

}  // namespace cohort_examples
