// Every collective over MPI, in the mode this run was started with (COHORT_MPI_COLLECTIVES):
// the automatic choice (MPI's own collective in mpi mode, cohort's choice in cohort mode) and
// the mode's explicit algorithms, over every dtype, op, root and a sweep of counts, checked
// against closed-form values (tests/support/collective_checks.h).
#include <gtest/gtest.h>

#include <vector>

#include "mpi_world.h"
#include "support/collective_checks.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::fail_if;
using testing::mpi_world;

// kAuto, then what this mode adds: MPI's own collectives, or each of cohort's algorithms.
std::vector<Algorithm> algorithms_of_this_mode(std::vector<Algorithm> cohort_algorithms) {
  std::vector<Algorithm> algorithms{Algorithm::kAuto};
  if (testing::mpi_mode_uses_mpi_collectives()) {
    algorithms.push_back(Algorithm::kEngine);
  } else {
    algorithms.insert(algorithms.end(), cohort_algorithms.begin(), cohort_algorithms.end());
  }
  return algorithms;
}

std::vector<size_t> counts() {
  return testing::sweep_counts(mpi_world().size(), 10007);
}

TEST(MpiCollectives, TheModeSetsTheDefaultAlgorithm) {
  const Algorithm chosen = mpi_world().algorithm_for(CollectiveKind::kAllreduce, 4096);
  if (testing::mpi_mode_uses_mpi_collectives()) {
    EXPECT_EQ(chosen, Algorithm::kEngine);
  } else {
    EXPECT_NE(chosen, Algorithm::kEngine);
  }
}

TEST(MpiCollectives, Allreduce) {
  Group& group = mpi_world();
  for (Algorithm algorithm : algorithms_of_this_mode(
           {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling, Algorithm::kDirect})) {
    for (DType dtype : testing::all_dtypes()) {
      for (ReduceOp op : testing::all_ops()) {
        for (size_t count : counts()) {
          fail_if(group, testing::check_allreduce(group, count, dtype, op, algorithm), "allreduce ",
                  algorithm_name(algorithm), " ", dtype_name(dtype), " ", reduce_op_name(op),
                  " count ", count);
        }
      }
    }
  }
}

TEST(MpiCollectives, AllreduceLarge) {
  Group& group = mpi_world();
  for (Algorithm algorithm : algorithms_of_this_mode({Algorithm::kRing})) {
    fail_if(
        group,
        testing::check_allreduce(group, (1u << 20) + 3, DType::kFloat32, ReduceOp::kSum, algorithm),
        "large allreduce ", algorithm_name(algorithm));
  }
}

TEST(MpiCollectives, BroadcastReduceGatherScatterToEveryRoot) {
  Group& group = mpi_world();
  const auto broadcast_algorithms =
      algorithms_of_this_mode({Algorithm::kDirect, Algorithm::kTree, Algorithm::kRing});
  const auto reduce_algorithms = algorithms_of_this_mode({Algorithm::kDirect, Algorithm::kTree});
  const auto linear = algorithms_of_this_mode({Algorithm::kDirect});
  for (DType dtype : testing::all_dtypes()) {
    for (size_t count : counts()) {
      for (int root = 0; root < group.size(); ++root) {
        for (Algorithm a : broadcast_algorithms) {
          fail_if(group, testing::check_broadcast(group, count, dtype, root, a), "broadcast ",
                  algorithm_name(a), " ", dtype_name(dtype), " count ", count, " root ", root);
        }
        for (Algorithm a : reduce_algorithms) {
          for (ReduceOp op : testing::all_ops()) {
            fail_if(group, testing::check_reduce(group, count, dtype, op, root, a), "reduce ",
                    algorithm_name(a), " ", dtype_name(dtype), " ", reduce_op_name(op), " count ",
                    count, " root ", root);
          }
        }
        for (Algorithm a : linear) {
          fail_if(group, testing::check_gather(group, count, dtype, root, a), "gather ",
                  algorithm_name(a), " ", dtype_name(dtype), " count ", count, " root ", root);
          fail_if(group, testing::check_scatter(group, count, dtype, root, a), "scatter ",
                  algorithm_name(a), " ", dtype_name(dtype), " count ", count, " root ", root);
        }
      }
    }
  }
}

TEST(MpiCollectives, AllgatherReduceScatterAllToAll) {
  Group& group = mpi_world();
  const auto blockwise =
      algorithms_of_this_mode({Algorithm::kDirect, Algorithm::kRing, Algorithm::kHalvingDoubling});
  for (DType dtype : testing::all_dtypes()) {
    for (size_t count : counts()) {
      for (Algorithm a : blockwise) {
        for (bool in_place : {false, true}) {
          fail_if(group, testing::check_allgather(group, count, dtype, a, in_place), "allgather ",
                  algorithm_name(a), " ", dtype_name(dtype), " count ", count,
                  in_place ? " in place" : "");
        }
        for (ReduceOp op : testing::all_ops()) {
          fail_if(group, testing::check_reduce_scatter(group, count, dtype, op, a),
                  "reduce_scatter ", algorithm_name(a), " ", dtype_name(dtype), " ",
                  reduce_op_name(op), " count ", count);
          fail_if(group, testing::check_reduce_scatter_in_place(group, count, dtype, op, a),
                  "reduce_scatter in place ", algorithm_name(a), " ", dtype_name(dtype), " ",
                  reduce_op_name(op), " count ", count);
        }
      }
      for (Algorithm a : algorithms_of_this_mode({Algorithm::kDirect})) {
        fail_if(group, testing::check_all_to_all(group, count, dtype, a), "all_to_all ",
                algorithm_name(a), " ", dtype_name(dtype), " count ", count);
      }
    }
  }
}

TEST(MpiCollectives, BarrierKeepsEveryRankTogether) {
  Group& group = mpi_world();
  std::vector<int32_t> before{group.rank()};
  for (int round = 0; round < 20; ++round) group.barrier();
  group.allreduce(make_buffer(before));
  EXPECT_EQ(before[0], group.size() * (group.size() - 1) / 2);
}

}  // namespace
}  // namespace cohort
