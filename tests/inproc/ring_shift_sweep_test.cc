// Ring shift over world sizes x counts x every dtype: rank r's output must hold rank r - 1's
// input. Also: an output overlapping the input is refused on the caller's thread without
// disturbing later collectives.
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

class RingShiftSweep : public ::testing::TestWithParam<int> {};

TEST_P(RingShiftSweep, EveryDTypeAndCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (DType dtype : testing::all_dtypes()) {
      for (size_t count : testing::sweep_counts(world, 20011)) {
        for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kDirect}) {
          testing::fail_if(group, testing::check_ring_shift(group, count, dtype, algorithm),
                           "ring_shift ", dtype_name(dtype), " count ", count, " ",
                           algorithm_name(algorithm), " world ", world);
        }
      }
    }
  });
}

TEST_P(RingShiftSweep, AnOutputOverlappingTheInputIsRefused) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    std::vector<float> data(8);
    EXPECT_THROW(group.ring_shift(ConstBuffer{data.data(), 6, DType::kFloat32},
                                  Buffer{data.data() + 2, 6, DType::kFloat32}),
                 InvalidArgument);
    testing::fail_if(group, testing::check_ring_shift(group, 3, DType::kFloat32, Algorithm::kAuto),
                     "ring_shift after a refused call, world ", world);
  });
}

INSTANTIATE_TEST_SUITE_P(World, RingShiftSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
