#include "algorithm_choice.h"

namespace cohort {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
  }
  return "unknown-collective";
}

namespace {

bool has_variant(CollectiveKind kind, Algorithm algorithm, bool shared_memory) {
  if (algorithm == Algorithm::kShm) return kind == CollectiveKind::kAllreduce && shared_memory;
  switch (kind) {
    case CollectiveKind::kAllreduce: return true;
    case CollectiveKind::kBroadcast: return algorithm != Algorithm::kHalvingDoubling;
    case CollectiveKind::kReduce:
      return algorithm == Algorithm::kDirect || algorithm == Algorithm::kTree;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter: return algorithm != Algorithm::kTree;
    default: return algorithm == Algorithm::kDirect;
  }
}

// Note [Provisional crossovers]: the allreduce thresholds for 2-4 ranks were measured with
// cohort-bench over loopback TCP on a 2-core machine (docs/algorithms.md has the table); every
// other crossover here is reasoned from the latency and bandwidth terms in docs/algorithms.md
// until measured on more ranks and on each transport. `bytes` is the larger buffer of the
// call: the output of an all-gather, the input of a reduce-scatter.
constexpr size_t kTinyBytes = 16 * 1024;  // latency-bound: one round wins
constexpr size_t kMidBytes = 1024 * 1024;  // beyond, bandwidth dominates: rings win
constexpr int kTreeWorld = 16;             // from here the ring's 2(n-1) latency terms hurt

Algorithm automatic_allreduce(size_t bytes, int world) {
  // With few ranks one round of whole-buffer exchanges beats any staging for longer.
  if (bytes <= kTinyBytes || (world <= 3 && bytes <= 64 * 1024)) return Algorithm::kDirect;
  // n = 3 folds to two participants; still ahead of the ring's 4 steps at a few hundred KiB.
  if (world == 3 && bytes <= 256 * 1024) return Algorithm::kHalvingDoubling;
  if (world >= 4 && bytes <= kMidBytes) return Algorithm::kHalvingDoubling;
  if (world >= kTreeWorld) return Algorithm::kTree;
  return Algorithm::kRing;
}

Algorithm automatic(CollectiveKind kind, size_t bytes, int world) {
  if (world <= 2 && kind != CollectiveKind::kAllreduce) return Algorithm::kDirect;  // all alike
  switch (kind) {
    case CollectiveKind::kAllreduce: return automatic_allreduce(bytes, world);
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

Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes, int world,
                           bool shared_memory) {
  if (requested != Algorithm::kAuto && has_variant(kind, requested, shared_memory)) {
    return requested;
  }
  // Shared memory moves bytes at memory speed with no system calls: it wins at every size.
  if (shared_memory && kind == CollectiveKind::kAllreduce) return Algorithm::kShm;
  return automatic(kind, bytes, world);
}

}  // namespace cohort
