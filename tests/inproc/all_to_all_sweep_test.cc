// All-to-all over world sizes x block counts x every dtype: block j of rank r's input must
// become block r of rank j's output. Also: a count not divisible by the group size is refused
// on the caller's thread without disturbing later collectives.
#include <gtest/gtest.h>

#include "support/collective_checks.h"
#include "support/inproc_sweep.h"

namespace cohort {
namespace {

class AllToAllSweep : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllSweep, EveryDTypeAndBlockCount) {
  const int world = GetParam();
  testing::run_inproc(world, [&](Group& group) {
    for (DType dtype : testing::all_dtypes()) {
      for (size_t block : testing::sweep_counts(world, 20011)) {
        for (Algorithm algorithm : {Algorithm::kAuto, Algorithm::kRing}) {
          testing::fail_if(group, testing::check_all_to_all(group, block, dtype, algorithm),
                           "all_to_all ", dtype_name(dtype), " block ", block, " ",
                           algorithm_name(algorithm), " world ", world);
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
    testing::fail_if(group, testing::check_all_to_all(group, 3, DType::kFloat32, Algorithm::kAuto),
                     "all_to_all after a refused call, world ", world);
  });
}

INSTANTIATE_TEST_SUITE_P(World, AllToAllSweep, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
