// Scatter from every root over world sizes x counts x every dtype. Scatter has only the linear
// algorithm; every other algorithm request must fall back to it (docs/algorithms.md).
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

// The root's input is movement values of the root at indices 0..n*count-1; rank r must get
// indices r*count .. r*count + count - 1.
std::string check_scatter(Group& group, size_t count, DType dtype, int root, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  const bool is_root = group.rank() == root;
  std::vector<uint8_t> in(is_root ? n * count * esize + 1 : 1);
  if (is_root) testing::fill_movement(in.data(), n * count, dtype, root);
  std::vector<uint8_t> out(count * esize + 1, 0xEE);
  CollectiveOptions opts;
  opts.root = root;
  opts.algorithm = algorithm;
  group.scatter(ConstBuffer{in.data(), is_root ? n * count : 0, dtype},
                Buffer{out.data(), count, dtype}, opts);
  if (out.back() != 0xEE) return "wrote past the end of the output";
  const size_t offset = static_cast<size_t>(group.rank()) * count;
  return testing::check_movement(
      out.data(), count, dtype, [&](size_t) { return root; }, [&](size_t i) { return offset + i; });
}

class ScatterSweep : public ::testing::TestWithParam<int> {};

TEST_P(ScatterSweep, EveryRootDTypeAndCount) {
  testing::sweep_dtypes_counts_roots(GetParam(), "scatter", 30011, check_scatter);
}

TEST_P(ScatterSweep, EveryAlgorithmRequestFallsBack) {
  testing::sweep_fallback_requests(GetParam(), "scatter", check_scatter);
}

INSTANTIATE_TEST_SUITE_P(World, ScatterSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
