#include "cohort/comm/options.h"
#include "cohort/core/error.h"

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
    case CollectiveKind::kRingShift: return "ring_shift";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
  }
  return "unknown-collective";
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::kAuto: return "auto";
    case Backend::kNative: return "native";
    case Backend::kMpi: return "MPI";
    case Backend::kNccl: return "NCCL";
  }
  return "?";
}

const char* algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kShm: return "shm";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kEngine: return "engine";
  }
  return "unknown-algorithm";
}

Algorithm parse_algorithm(const std::string& name) {
  if (name == "auto") return Algorithm::kAuto;
  if (name == "ring") return Algorithm::kRing;
  if (name == "tree") return Algorithm::kTree;
  if (name == "hd" || name == "halving_doubling" || name == "rabenseifner") {
    return Algorithm::kHalvingDoubling;
  }
  if (name == "direct") return Algorithm::kDirect;
  if (name == "shm") return Algorithm::kShm;
  if (name == "hierarchical" || name == "hier") return Algorithm::kHierarchical;
  if (name == "engine") return Algorithm::kEngine;
  throw InvalidArgument("unknown algorithm '" + name +
                        "': use auto, ring, tree, halving_doubling (hd), direct, shm, "
                        "hierarchical (hier) or engine");
}

}  // namespace cohort
