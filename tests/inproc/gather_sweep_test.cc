// Gather to every root over world sizes x counts x every dtype. Gather has only the linear
// algorithm; every other algorithm request must fall back to it (docs/algorithms.md).
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

std::string check_gather(Group& group, size_t count, DType dtype, int root, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  std::vector<uint8_t> in(count * esize + 1);
  testing::fill_movement(in.data(), count, dtype, group.rank());
  // Only the root's output matters; the others pass an empty one.
  const bool is_root = group.rank() == root;
  std::vector<uint8_t> out(is_root ? n * count * esize + 1 : 1, 0xEE);
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.gather(ConstBuffer{in.data(), count, dtype},
               Buffer{out.data(), is_root ? n * count : 0, dtype}, opts);
  if (out.back() != 0xEE) return "wrote past the end of the output";
  if (!is_root) return "";
  return testing::check_movement(
      out.data(), n * count, dtype, [&](size_t i) { return static_cast<int>(i / count); },
      [&](size_t i) { return i % count; });
}

class GatherSweep : public ::testing::TestWithParam<int> {};

TEST_P(GatherSweep, EveryRootDTypeAndCount) {
  testing::sweep_dtypes_counts_roots(GetParam(), "gather", 30011, check_gather);
}

TEST_P(GatherSweep, EveryAlgorithmRequestFallsBack) {
  testing::sweep_fallback_requests(GetParam(), "gather", check_gather);
}

INSTANTIATE_TEST_SUITE_P(World, GatherSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
