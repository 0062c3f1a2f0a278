// Broadcast from every root over world sizes x counts x every dtype x every algorithm
// (direct, binomial tree, pipelined chain, auto); every rank must end with the root's data.
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kTree, Algorithm::kRing,
                                 Algorithm::kAuto};

class BroadcastSweep : public ::testing::TestWithParam<int> {};

TEST_P(BroadcastSweep, EveryRootDTypeAlgorithmAndCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (size_t count : testing::sweep_counts(world, 20011)) {
          for (int root = 0; root < world; ++root) {
            testing::fail_if(group, testing::check_broadcast(group, count, dtype, root, algorithm),
                             "broadcast ", algorithm_name(algorithm), " ", dtype_name(dtype),
                             " count ", count, " root ", root, " world ", world);
          }
        }
      }
    }
  });
}

// Many pipeline segments (and, for the chain, many in flight at once): the segmented variants.
TEST_P(BroadcastSweep, LargeFloat32) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  const int world = GetParam();
  const int root = world / 2;
  testing::sweep_algorithms(world, "broadcast", {Algorithm::kTree, Algorithm::kRing},
                            [root](Group& group, Algorithm algorithm) {
                              return testing::check_broadcast(group, (1u << 20) + 3,
                                                              DType::kFloat32, root, algorithm);
                            });
}

INSTANTIATE_TEST_SUITE_P(World, BroadcastSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
