// All-gather over world sizes x counts x every dtype x every algorithm (direct, ring, Bruck,
// auto), out of place and in place (the input is the rank's own block of the output).
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling,
                                 Algorithm::kAuto};

class AllgatherSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllgatherSweep, EveryDTypeAlgorithmAndCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : testing::all_dtypes()) {
        for (size_t count : testing::sweep_counts(world, 10007)) {
          for (bool in_place : {false, true}) {
            testing::fail_if(group,
                             testing::check_allgather(group, count, dtype, algorithm, in_place),
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
        return testing::check_allgather(group, (1u << 18) + 5, DType::kFloat32, algorithm, false);
      });
}

INSTANTIATE_TEST_SUITE_P(World, AllgatherSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
