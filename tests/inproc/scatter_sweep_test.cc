// Scatter from every root over world sizes x counts x every dtype. Scatter has only the linear
// algorithm; every other algorithm request must fall back to it (docs/algorithms.md).
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

class ScatterSweep : public ::testing::TestWithParam<int> {};

TEST_P(ScatterSweep, EveryRootDTypeAndCount) {
  testing::sweep_dtypes_counts_roots(GetParam(), "scatter", 30011, testing::check_scatter);
}

TEST_P(ScatterSweep, EveryAlgorithmRequestFallsBack) {
  testing::sweep_fallback_requests(GetParam(), "scatter", testing::check_scatter);
}

INSTANTIATE_TEST_SUITE_P(World, ScatterSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
