// Allreduce over world sizes 1..9 x counts x every dtype x every op x every algorithm, against
// closed-form results (tests/support: sweep_value, sweep_expected).
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

const DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                         DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kProduct};
const Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling,
                                 Algorithm::kDirect, Algorithm::kAuto};

std::vector<size_t> small_counts(int world) {
  // 0, 1, fewer than world, not divisible by world, spanning several ring segments (dropped
  // at COHORT_TEST_SCALE=small).
  return testing::sweep_counts(world, 70001);
}

class AllreduceSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceSweep, EveryDTypeOpAlgorithmAndCount) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : kDTypes) {
        for (ReduceOp op : kOps) {
          for (size_t count : small_counts(world)) {
            const std::string error =
                testing::check_allreduce(*groups[rank], count, dtype, op, algorithm);
            testing::fail_if(*groups[rank], error, algorithm_name(algorithm), " ",
                             dtype_name(dtype), " ", reduce_op_name(op), " count ", count,
                             " world ", world);
          }
        }
      }
    }
  });
}

TEST_P(AllreduceSweep, LargeFloat32Sum) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    for (Algorithm algorithm : kAlgorithms) {
      const std::string error = testing::check_allreduce(
          *groups[rank], (1u << 20) + 3, DType::kFloat32, ReduceOp::kSum, algorithm);
      testing::fail_if(*groups[rank], error, algorithm_name(algorithm), " world ", world);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, AllreduceSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
