// Broadcast from every root over world sizes x counts x every dtype x every algorithm
// (direct, binomial tree, pipelined chain, auto); every rank must end with the root's data.
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kTree, Algorithm::kRing,
                                 Algorithm::kAuto};

// Every rank starts with its own values; returns "" when all hold the root's afterwards.
std::string check_broadcast(Group& group, size_t count, DType dtype, int root,
                            Algorithm algorithm) {
  std::vector<uint8_t> data(count * dtype_size(dtype) + 1);
  testing::fill_movement(data.data(), count, dtype, group.rank());
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.broadcast(Buffer{data.data(), count, dtype}, opts);
  return testing::check_movement(
      data.data(), count, dtype, [&](size_t) { return root; }, [](size_t i) { return i; });
}

class BroadcastSweep : public ::testing::TestWithParam<int> {};

TEST_P(BroadcastSweep, EveryRootDTypeAlgorithmAndCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (size_t count : testing::sweep_counts(world, 20011)) {
          for (int root = 0; root < world; ++root) {
            testing::fail_if(group, check_broadcast(group, count, dtype, root, algorithm),
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
                              return check_broadcast(group, (1u << 20) + 3, DType::kFloat32, root,
                                                     algorithm);
                            });
}

INSTANTIATE_TEST_SUITE_P(World, BroadcastSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
