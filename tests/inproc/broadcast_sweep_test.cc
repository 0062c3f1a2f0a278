// Broadcast from every root over world sizes x counts x every dtype x every algorithm
// (direct, binomial tree, pipelined chain, auto); every rank must end with the root's data.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

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
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
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
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    for (Algorithm algorithm : {Algorithm::kTree, Algorithm::kRing}) {
      const int root = world / 2;
      testing::fail_if(
          *groups[rank],
          check_broadcast(*groups[rank], (1u << 20) + 3, DType::kFloat32, root, algorithm),
          "broadcast ", algorithm_name(algorithm), " world ", world);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, BroadcastSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
