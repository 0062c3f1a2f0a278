// All-to-all over world sizes x block counts x every dtype: block j of rank r's input must
// become block r of rank j's output. Also: a count not divisible by the group size is refused
// on the caller's thread without disturbing later collectives.
#include <gtest/gtest.h>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

// Input element i of rank r is movement_value(r, i); so output element of block j, offset k,
// came from rank j at index r*block + k.
std::string check_all_to_all(Group& group, size_t block, DType dtype, Algorithm algorithm) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  const size_t count = n * block;
  std::vector<uint8_t> in(count * esize + 1);
  testing::fill_movement(in.data(), count, dtype, group.rank());
  std::vector<uint8_t> out(count * esize + 1, 0xEE);
  CollectiveOptions opts;
  opts.algorithm = algorithm;
  group.all_to_all(ConstBuffer{in.data(), count, dtype}, Buffer{out.data(), count, dtype}, opts);
  if (out.back() != 0xEE) return "wrote past the end of the output";
  const size_t me = static_cast<size_t>(group.rank());
  return testing::check_movement(
      out.data(), count, dtype, [&](size_t i) { return static_cast<int>(i / block); },
      [&](size_t i) { return me * block + i % block; });
}

class AllToAllSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllSweep, EveryDTypeAndBlockCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (DType dtype : testing::all_dtypes()) {
      for (size_t block : testing::sweep_counts(world, 20011)) {
        for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing}) {
          testing::fail_if(group, check_all_to_all(group, block, dtype, algorithm), "all_to_all ",
                           dtype_name(dtype), " block ", block, " ", algorithm_name(algorithm),
                           " world ", world);
        }
      }
    }
  });
}

TEST_P(AllToAllSweep, IndivisibleCountIsRefused) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "every count divides by 1";
  testing::run_inproc(world, [&](Group& group) {
    std::vector<float> in(static_cast<size_t>(world) + 1), out(in.size());
    EXPECT_THROW(group.all_to_all(make_buffer(in), make_buffer(out)), InvalidArgument);
    // Nothing was issued: the group still works and the ranks still agree on sequence numbers.
    testing::fail_if(group, check_all_to_all(group, 3, DType::kFloat32, Algorithm::kAuto),
                     "all_to_all after a refused call, world ", world);
  });
}

INSTANTIATE_TEST_SUITE_P(World, AllToAllSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
