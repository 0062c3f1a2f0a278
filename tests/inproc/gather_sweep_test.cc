// Gather to every root over world sizes x counts x every dtype. Gather has only the linear
// algorithm; every other algorithm request must fall back to it (docs/algorithms.md).
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

class GatherSweep : public ::testing::TestWithParam<int> {};

TEST_P(GatherSweep, EveryRootDTypeAndCount) {
  testing::sweep_dtypes_counts_roots(GetParam(), "gather", 30011, testing::check_gather);
}

TEST_P(GatherSweep, EveryAlgorithmRequestFallsBack) {
  testing::sweep_fallback_requests(GetParam(), "gather", testing::check_gather);
}

INSTANTIATE_TEST_SUITE_P(World, GatherSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
