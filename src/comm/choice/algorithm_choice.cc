#include "choice/algorithm_choice.h"

#include <limits>

#include "backends/native_backend.h"

namespace cohort {

namespace {

bool one_node_with_shared_memory(const GroupShape& shape) {
  return shape.nodes == 1 && shape.shared_memory && shape.world > 1;
}

bool has_shm_variant(CollectiveKind kind) {
  return NativeBackend::has(kind, Algorithm::kShm);
}

// Whether the group can run `algorithm` for `kind`: cohort has it (NativeBackend's table), and
// the group's shape allows it (shared memory in one node; several nodes with shared memory in
// each for hierarchical); kEngine where the group has an engine.
bool has_variant(CollectiveKind kind, Algorithm algorithm, const GroupShape& shape) {
  if (algorithm == Algorithm::kEngine) {
    return shape.engine && kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv;
  }
  if (!NativeBackend::has(kind, algorithm)) return false;
  if (algorithm == Algorithm::kShm) return one_node_with_shared_memory(shape);
  if (algorithm == Algorithm::kHierarchical) {
    return shape.nodes > 1 && shape.local_size > 1 && shape.shared_memory;
  }
  return true;
}

// Note [Provisional crossovers]: the rules for the collectives other than allreduce are
// reasoned from the latency and bandwidth terms in docs/algorithms.md, not yet from the cost
// model. `bytes` is the larger buffer of the call: the output of an all-gather, the input of a
// reduce-scatter.
constexpr size_t kTinyBytes = 16 * 1024;   // latency-bound: one round wins
constexpr size_t kMidBytes = 1024 * 1024;  // beyond, bandwidth dominates: rings win

Algorithm automatic(CollectiveKind kind, size_t bytes, const GroupShape& shape,
                    const CostModel& model) {
  if (kind == CollectiveKind::kAllreduce) return cheapest_allreduce(bytes, shape, model);
  // Inside one node, shared memory moves bytes at memory speed with no system calls.
  if (has_shm_variant(kind) && one_node_with_shared_memory(shape)) return Algorithm::kShm;
  if (shape.world <= 2) return Algorithm::kDirect;  // all alike
  switch (kind) {
    case CollectiveKind::kBroadcast:
      return bytes <= kMidBytes ? Algorithm::kTree : Algorithm::kRing;
    case CollectiveKind::kReduce:
      return bytes <= kTinyBytes ? Algorithm::kDirect : Algorithm::kTree;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter:
      if (bytes <= kTinyBytes) return Algorithm::kDirect;
      return bytes <= kMidBytes ? Algorithm::kHalvingDoubling : Algorithm::kRing;
    default: return Algorithm::kDirect;
  }
}

}  // namespace

Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes,
                           const GroupShape& shape, const CostModel& model) {
  if (requested != Algorithm::kAuto && has_variant(kind, requested, shape)) return requested;
  return automatic(kind, bytes, shape, model);
}

double predict_automatic(CollectiveKind kind, size_t bytes, const GroupShape& shape,
                         const CostModel& model) {
  const Algorithm algorithm = automatic(kind, bytes, shape, model);
  switch (kind) {
    case CollectiveKind::kAllreduce: return predict_allreduce(algorithm, bytes, shape, model);
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter:
      return predict_gather_or_scatter(kind, algorithm, bytes, shape, model);
    default: return std::numeric_limits<double>::infinity();
  }
}

}  // namespace cohort
