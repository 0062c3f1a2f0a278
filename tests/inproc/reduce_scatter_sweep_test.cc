// Reduce-scatter over world sizes x counts x every dtype x every op x every algorithm (direct,
// ring, recursive halving, auto): rank r must get the reduction of block r, out of place and in
// place (the output is the rank's own block of the input).
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                                 Algorithm::kAuto};

class ReduceScatterSweep : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterSweep, EveryDTypeOpAlgorithmAndCount) {
  testing::sweep_reductions(GetParam(), "reduce_scatter", kAlgorithms, 8009,
                            [](Group& group, size_t count, DType dtype, ReduceOp op,
                               Algorithm algorithm) {
                              return testing::check_reduce_scatter(group, count, dtype, op,
                                                                   algorithm);
                            });
}

TEST_P(ReduceScatterSweep, InPlaceEveryDTypeOpAlgorithmAndCount) {
  testing::sweep_reductions(GetParam(), "reduce_scatter in place", kAlgorithms, 8009,
                            [](Group& group, size_t count, DType dtype, ReduceOp op,
                               Algorithm algorithm) {
                              return testing::check_reduce_scatter_in_place(group, count, dtype,
                                                                            op, algorithm);
                            });
}

// Blocks of more pipeline segments than the landing window holds, so the windows wrap around:
// the segmented variants.
TEST_P(ReduceScatterSweep, LargeFloat32Sum) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  testing::sweep_algorithms(
      GetParam(), "reduce_scatter", {Algorithm::kRing, Algorithm::kHalvingDoubling},
      [](Group& group, Algorithm algorithm) {
        return testing::check_reduce_scatter(group, (1u << 18) + 3, DType::kFloat32, ReduceOp::kSum,
                                             algorithm);
      });
  testing::sweep_algorithms(
      GetParam(), "reduce_scatter in place", {Algorithm::kRing, Algorithm::kHalvingDoubling},
      [](Group& group, Algorithm algorithm) {
        return testing::check_reduce_scatter_in_place(group, (1u << 18) + 3, DType::kFloat32,
                                                      ReduceOp::kAvg, algorithm);
      });
}

INSTANTIATE_TEST_SUITE_P(World, ReduceScatterSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
