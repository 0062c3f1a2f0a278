// One allreduce algorithm by name, for the hierarchical allreduce's phase across nodes. A
// group's own allreduce is dispatched once, by NativeBackend's table (backends/native_backend.cc).
#include "algorithms/algorithms.h"
#include "cohort/core/check.h"

namespace cohort::algo {

void allreduce_with(Algorithm algorithm, Context& ctx, void* data, size_t count, DType dtype,
                    ReduceOp op, Algorithm across) {
  switch (algorithm) {
    case Algorithm::kRing: allreduce_ring(ctx, data, count, dtype, op); break;
    case Algorithm::kTree: allreduce_tree(ctx, data, count, dtype, op); break;
    case Algorithm::kHalvingDoubling:
      allreduce_halving_doubling(ctx, data, count, dtype, op);
      break;
    case Algorithm::kShm: allreduce_shm(ctx, data, count, dtype, op); break;
    case Algorithm::kHierarchical:
      allreduce_hierarchical(ctx, data, count, dtype, op, across);
      break;
    case Algorithm::kDirect: allreduce_direct(ctx, data, count, dtype, op); break;
    case Algorithm::kAuto:
    case Algorithm::kEngine:
      // The group chooses before it runs (group/dispatcher.cc); an engine runs its own.
      COHORT_INTERNAL_ASSERT(false, "allreduce_with needs one of cohort's algorithms, not ",
                             algorithm_name(algorithm));
  }
}

}  // namespace cohort::algo
