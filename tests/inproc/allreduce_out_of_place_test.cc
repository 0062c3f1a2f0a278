// Out-of-place allreduce (separate input and output) over world sizes x counts x every dtype
// x every op x every algorithm: the output gets the result, the input stays as it was.
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling,
                                 Algorithm::kDirect, Algorithm::kAuto};

std::string check_out_of_place(Group& group, size_t count, DType dtype, ReduceOp op,
                               Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  std::vector<uint8_t> in(count * esize + 1);
  testing::fill_sweep(in.data(), count, dtype, op, group.rank());
  const std::vector<uint8_t> before = in;
  std::vector<uint8_t> out(count * esize + 1, 0xEE);
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  group.allreduce(ConstBuffer{in.data(), count, dtype}, Buffer{out.data(), count, dtype}, opts);
  if (in != before) return "the input changed";
  if (out.back() != 0xEE) return "wrote past the end of the output";
  return testing::check_sweep(out.data(), count, dtype, op, group.size());
}

class AllreduceOutOfPlace : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceOutOfPlace, EveryDTypeOpAlgorithmAndCount) {
  testing::sweep_reductions(GetParam(), "allreduce(in, out)", kAlgorithms, 9001,
                            check_out_of_place);
}

TEST(AllreduceOutOfPlace, MismatchedBuffersAreRefused) {
  auto groups = testing::make_inproc_groups(1, testing::quick_options());
  std::vector<float> in(4), shorter(3);
  std::vector<double> other(4);
  EXPECT_THROW(groups[0]->allreduce(make_buffer(in), make_buffer(shorter)), InvalidArgument);
  EXPECT_THROW(groups[0]->allreduce(make_buffer(in), make_buffer(other)), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(World, AllreduceOutOfPlace, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
