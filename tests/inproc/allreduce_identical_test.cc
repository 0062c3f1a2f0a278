// Data-parallel training needs every rank to end an allreduce with bitwise the same result,
// also where floating-point rounding makes the order of combination visible. Values here are
// random, so sums round differently in different orders; every algorithm must still leave all
// ranks with identical bytes (ranks are threads, so the test compares their buffers directly).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "support/inproc_sweep.h"

namespace cohort {
namespace {

const Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling,
                                 Algorithm::kDirect, Algorithm::kAuto};
const DType kFloatTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16};

class AllreduceIdentical : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceIdentical, EveryRankHoldsTheSameBytes) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "nothing to compare";
  std::vector<size_t> counts = testing::sweep_small_counts(world);
  counts.push_back(testing::small_scale() ? 5003 : 100003);  // several tree segments
  // results[rank]: filled by each rank, compared by rank 0 after a barrier.
  std::vector<std::vector<uint8_t>> results(static_cast<size_t>(world));
  testing::run_inproc(world, [&](Group& group) {
    const int rank = group.rank();
    std::mt19937 random(static_cast<unsigned>(1234 + rank));
    std::uniform_real_distribution<double> value(-1.0, 1.0);
    for (Algorithm algorithm : kAlgorithms) {
      for (DType dtype : kFloatTypes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct}) {
          for (size_t count : counts) {
            auto& mine = results[static_cast<size_t>(rank)];
            mine.assign(count * dtype_size(dtype), 0);
            for (size_t i = 0; i < count; ++i) {
              testing::write_element(mine.data(), i, dtype, value(random));
            }
            CollectiveOptions opts;
            opts.op = op;
            opts.algorithm = algorithm;
            group.allreduce(Buffer{mine.data(), count, dtype}, opts);
            group.barrier();  // every rank's result is in place
            std::string error;
            if (rank == 0) {
              for (int r = 1; r < world && error.empty(); ++r) {
                if (results[static_cast<size_t>(r)] != mine) {
                  error = "rank " + std::to_string(r) + " differs from rank 0";
                }
              }
            }
            testing::fail_if(group, error, "allreduce ", algorithm_name(algorithm), " ",
                             dtype_name(dtype), " ", reduce_op_name(op), " count ", count,
                             " world ", world);
            group.barrier();  // rank 0 is done reading before anyone refills
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(World, AllreduceIdentical, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
