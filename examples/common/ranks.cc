#include "ranks.h"

#include <algorithm>
#include <string>
#include <thread>

#include "cohort/core/error.h"

namespace cohort_examples {

int64_t per_rank_batch(int64_t global_batch, const cohort::Group& group) {
  if (global_batch % group.size() != 0) {
    throw cohort::InvalidArgument("--batch-size " + std::to_string(global_batch) +
                                  " does not split evenly over " + std::to_string(group.size()) +
                                  " ranks: give a multiple of the number of ranks");
  }
  return global_batch / group.size();
}

int threads_per_rank(int requested, const cohort::Group& group) {
  if (requested > 0) return requested;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, group.local_size()));
}

}  // namespace cohort_examples
