// Reduce to every root over world sizes x counts x every dtype x every op x every algorithm
// (direct, binomial tree, auto). The root gets the closed-form result; every other rank's
// buffer must be left as it was.
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kTree, Algorithm::kAuto};

class ReduceSweep : public ::testing::TestWithParam<int> {};

TEST_P(ReduceSweep, EveryRootDTypeOpAlgorithmAndCount) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  const std::vector<size_t> counts = testing::sweep_small_counts(world);  // large: below
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (ReduceOp op : testing::all_ops()) {
          for (size_t count : counts) {
            for (int root = 0; root < world; ++root) {
              testing::fail_if(
                  group, testing::check_reduce(group, count, dtype, op, root, algorithm), "reduce ",
                  algorithm_name(algorithm), " ", dtype_name(dtype), " ", reduce_op_name(op),
                  " count ", count, " root ", root, " world ", world);
            }
          }
        }
      }
    }
  });
}

// The large count for every dtype, op and algorithm; the root turns with each case so that
// every root gets some (a full cross product would take too long).
TEST_P(ReduceSweep, LargeCountRotatingRoot) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    int turn = 0;
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (ReduceOp op : testing::all_ops()) {
          const int root = turn++ % world;
          testing::fail_if(group, testing::check_reduce(group, 30011, dtype, op, root, algorithm),
                           "reduce ", algorithm_name(algorithm), " ", dtype_name(dtype), " ",
                           reduce_op_name(op), " root ", root, " world ", world);
        }
      }
    }
  });
}

// More tree segments than the landing windows hold.
TEST_P(ReduceSweep, LargeFloat32Sum) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    for (Algorithm algorithm : {Algorithm::kTree}) {
      const int root = world - 1;
      testing::fail_if(*groups[rank],
                       testing::check_reduce(*groups[rank], (1u << 20) + 3, DType::kFloat32,
                                             ReduceOp::kSum, root, algorithm),
                       "reduce ", algorithm_name(algorithm), " world ", world);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, ReduceSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
