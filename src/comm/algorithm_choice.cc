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

bool has_variant(CollectiveKind kind, Algorithm algorithm) {
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

// Crossover points measured on loopback TCP, 2-4 ranks (docs/algorithms.md).
Algorithm automatic(CollectiveKind kind, size_t bytes, int world) {
  switch (kind) {
    case CollectiveKind::kAllreduce:
      if (bytes <= 16 * 1024 || (world == 2 && bytes <= 64 * 1024)) return Algorithm::kDirect;
      return Algorithm::kRing;
    case CollectiveKind::kBroadcast:
      return Algorithm::kDirect;
    case CollectiveKind::kReduce:
      return Algorithm::kDirect;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter:
      return Algorithm::kDirect;
    default:
      return Algorithm::kDirect;
  }
}

}  // namespace

Algorithm choose_algorithm(CollectiveKind kind, Algorithm requested, size_t bytes, int world) {
  if (requested != Algorithm::kAuto && has_variant(kind, requested)) return requested;
  return automatic(kind, bytes, world);
}

}  // namespace cohort
