// All-gather over world sizes x counts x every dtype x every algorithm (direct, ring, Bruck,
// auto), out of place and in place (the input is the rank's own block of the output).
#include <gtest/gtest.h>

#include <cstring>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                                 Algorithm::kAuto};

std::string check_allgather(Group& group, size_t count, DType dtype, Algorithm algorithm,
                            bool in_place) {
  const size_t esize = dtype_size(dtype);
  const auto n = static_cast<size_t>(group.size());
  std::vector<uint8_t> in(count * esize + 1);
  std::vector<uint8_t> out(n * count * esize + 1, 0xEE);
  testing::fill_movement(in.data(), count, dtype, group.rank());
  const void* input = in.data();
  if (in_place) {
    uint8_t* own = out.data() + group.rank() * count * esize;
    if (count > 0) std::memcpy(own, in.data(), count * esize);
    input = own;
  }
  CollectiveOptions opts;
  opts.algorithm = algorithm;
  group.allgather(ConstBuffer{input, count, dtype}, Buffer{out.data(), n * count, dtype}, opts);
  if (out.back() != 0xEE) return "wrote past the end of the output";
  return testing::check_movement(
      out.data(), n * count, dtype, [&](size_t i) { return static_cast<int>(i / count); },
      [&](size_t i) { return i % count; });
}

class AllgatherSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllgatherSweep, EveryDTypeAlgorithmAndCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (size_t count : testing::sweep_counts(world, 10007)) {
          for (bool in_place : {false, true}) {
            testing::fail_if(group, check_allgather(group, count, dtype, algorithm, in_place),
                             "allgather ", algorithm_name(algorithm), " ", dtype_name(dtype),
                             " count ", count, in_place ? " in place" : "", " world ", world);
          }
        }
      }
    }
  });
}

// Blocks of several pipeline segments each: the segmented variants.
TEST_P(AllgatherSweep, LargeFloat32) {
  if (testing::small_scale()) GTEST_SKIP() << "COHORT_TEST_SCALE=small";
  testing::sweep_algorithms(
      GetParam(), "allgather", {Algorithm::kRing, Algorithm::kHalvingDoubling},
      [](Group& group, Algorithm algorithm) {
        return check_allgather(group, (1u << 18) + 5, DType::kFloat32, algorithm, false);
      });
}

INSTANTIATE_TEST_SUITE_P(World, AllgatherSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
