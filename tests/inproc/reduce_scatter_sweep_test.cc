// Reduce-scatter over world sizes x counts x every dtype x every op x every algorithm (direct,
// ring, recursive halving, auto): rank r must get the reduction of block r.
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                                 Algorithm::kAuto};

// `count` is the per-rank output count; the input holds size() blocks of it. Element j of the
// input is sweep_value(op, rank, j), so block r of the result is sweep_expected at r*count+i.
std::string check_reduce_scatter(Group& group, size_t count, DType dtype, ReduceOp op,
                                 Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  std::vector<uint8_t> in(n * count * esize + 1);
  std::vector<uint8_t> out(count * esize + 1, 0xEE);
  testing::fill_sweep(in.data(), n * count, dtype, op, group.rank());
  const std::vector<uint8_t> before = in;
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  group.reduce_scatter(ConstBuffer{in.data(), n * count, dtype}, Buffer{out.data(), count, dtype},
                       opts);
  if (out.back() != 0xEE) return "wrote past the end of the output";
  if (in != before) return "the input changed";
  return testing::check_sweep(out.data(), count, dtype, op, group.size(),
                              static_cast<size_t>(group.rank()) * count);
}

class ReduceScatterSweep : public ::testing::TestWithParam<int> {};

TEST_P(ReduceScatterSweep, EveryDTypeOpAlgorithmAndCount) {
  testing::sweep_reductions(GetParam(), "reduce_scatter", kAlgorithms, 8009, check_reduce_scatter);
}

// Blocks of more pipeline segments than the landing window holds, so the windows wrap around:
// the segmented variants.
TEST_P(ReduceScatterSweep, LargeFloat32Sum) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  testing::sweep_algorithms(GetParam(), "reduce_scatter",
                            {Algorithm::kRing, Algorithm::kHalvingDoubling},
                            [](Group& group, Algorithm algorithm) {
                              return check_reduce_scatter(group, (1u << 18) + 3, DType::kFloat32,
                                                          ReduceOp::kSum, algorithm);
                            });
}

INSTANTIATE_TEST_SUITE_P(World, ReduceScatterSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
