// Which parameters share a bucket. Pure bookkeeping on sizes, kept apart from the reducer so
// it is easy to test and to read.
#pragma once

#include <cstddef>
#include <vector>

namespace cohort {

struct BucketPlanInput {
  // Parameter indices in the order their gradients are expected to become ready (reverse
  // registration order at first, the measured order after the first iteration).
  std::vector<size_t> order;
  // Per parameter (indexed by parameter index): gradient bytes, and a key that must be equal
  // for parameters that may share a bucket (the dtype: one bucket holds one dtype).
  std::vector<size_t> bytes;
  std::vector<int> kind;
  // The first bucket of each kind closes at first_cap_bytes, later ones at cap_bytes; a bucket
  // closes as soon as it reaches its cap, so a cap of 0 gives one parameter per bucket.
  size_t first_cap_bytes = 0;
  size_t cap_bytes = 0;
};

// Buckets as lists of parameter indices (each in `order`'s order), sorted by the position in
// `order` of their first parameter, so buckets fill up in index order during backward.
std::vector<std::vector<size_t>> plan_buckets(const BucketPlanInput& input);

}  // namespace cohort
