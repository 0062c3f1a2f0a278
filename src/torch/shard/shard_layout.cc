#include "shard/shard_layout.h"

#include <algorithm>

#include "cohort/core/check.h"

namespace cohort {

ShardRange shard_of(int64_t offset, int64_t numel, int64_t bucket_numel, int world, int rank) {
  COHORT_INTERNAL_ASSERT(world > 0 && bucket_numel % world == 0 && offset >= 0 && numel >= 0 &&
                             offset + numel <= bucket_numel,
                         "shard_of: [", offset, ", +", numel, ") in a bucket of ", bucket_numel,
                         " over ", world, " ranks");
  const int64_t block = bucket_numel / world;
  const int64_t block_begin = block * rank;
  const int64_t begin = std::max(offset, block_begin);
  const int64_t end = std::min(offset + numel, block_begin + block);
  if (end <= begin) return {};
  return {begin - offset, begin - block_begin, end - begin};
}

}  // namespace cohort
