// Scaffolding shared by the inproc sweep tests: one in-process group per rank thread, a check
// per case that returns "" or what was wrong, and a failure that names the case (fail_if).
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <string>

#include "support/test_support.h"

namespace cohort::testing {

// Makes `world` in-process groups with quick_options() and runs fn(group) on each rank's
// thread, under run_ranks' deadline.
inline void run_inproc(int world, const std::function<void(Group& group)>& fn) {
  auto groups = make_inproc_groups(world, quick_options());
  run_ranks(world, [&](int rank) { fn(*groups[rank]); });
}

// One case on this rank: "" or a description of what was wrong.
using AlgorithmCheck = std::function<std::string(Group& group, Algorithm algorithm)>;
using RootedCheck = std::function<std::string(Group& group, size_t count, DType dtype, int root,
                                              Algorithm algorithm)>;
using ReductionCheck = std::function<std::string(Group& group, size_t count, DType dtype,
                                                 ReduceOp op, Algorithm algorithm)>;

// check(group, algorithm) for each algorithm (the large cases of the segmented variants);
// a failure names `name`, the algorithm and the world size.
inline void sweep_algorithms(int world, const char* name,
                             std::initializer_list<Algorithm> algorithms,
                             const AlgorithmCheck& check) {
  run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : algorithms) {
      fail_if(group, check(group, algorithm), name, " ", algorithm_name(algorithm), " world ",
              world);
    }
  });
}

// Every dtype x sweep_counts(world, large) x every root, with the automatic algorithm: for the
// rooted collectives that have only the linear algorithm (gather, scatter).
inline void sweep_dtypes_counts_roots(int world, const char* name, size_t large,
                                      const RootedCheck& check) {
  run_inproc(world, [&](Group& group) {
    for (DType dtype : all_dtypes()) {
      for (size_t count : sweep_counts(world, large)) {
        for (int root = 0; root < world; ++root) {
          fail_if(group, check(group, count, dtype, root, Algorithm::kAuto), name, " ",
                  dtype_name(dtype), " count ", count, " root ", root, " world ", world);
        }
      }
    }
  });
}

// A collective with only the linear algorithm must accept every algorithm request and fall back
// to it (docs/algorithms.md): every request x sweep_small_counts(world), int32, root world - 1.
inline void sweep_fallback_requests(int world, const char* name, const RootedCheck& check) {
  static const Algorithm kRequests[] = {Algorithm::kAuto, Algorithm::kDirect, Algorithm::kRing,
                                        Algorithm::kTree, Algorithm::kHalvingDoubling};
  run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : kRequests) {
      for (size_t count : sweep_small_counts(world)) {
        fail_if(group, check(group, count, DType::kInt32, world - 1, algorithm), name, " ",
                algorithm_name(algorithm), " count ", count, " world ", world);
      }
    }
  });
}

// Every algorithm x dtype x op x sweep_counts(world, large), for the reductions without a root
// (allreduce out of place, reduce_scatter).
template <typename Algorithms>
void sweep_reductions(int world, const char* name, const Algorithms& algorithms, size_t large,
                      const ReductionCheck& check) {
  run_inproc(world, [&](Group& group) {
    for (Algorithm algorithm : algorithms) {
      for (DType dtype : all_dtypes()) {
        for (ReduceOp op : all_ops()) {
          for (size_t count : sweep_counts(world, large)) {
            fail_if(group, check(group, count, dtype, op, algorithm), name, " ",
                    algorithm_name(algorithm), " ", dtype_name(dtype), " ", reduce_op_name(op),
                    " count ", count, " world ", world);
          }
        }
      }
    }
  });
}

}  // namespace cohort::testing
