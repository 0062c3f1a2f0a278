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
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSend: return "send";
    case CollectiveKind::kRecv: return "recv";
  }
  return "unknown-collective";
}

const char* call_site_name(CallSite site) {
  switch (site) {
    case CallSite::kUser: return "";
    case CallSite::kDdpConstructor: return "DistributedDataParallel's constructor";
    case CallSite::kDdpGradients: return "DistributedDataParallel's gradient allreduce";
    case CallSite::kDdpUnusedParameters: return "DistributedDataParallel's unused-parameter search";
    case CallSite::kDdpJoin: return "DistributedDataParallel::join";
    case CallSite::kDdpBuffers: return "DistributedDataParallel's buffer broadcast";
    case CallSite::kCheckpointSave: return "save_checkpoint";
    case CallSite::kCheckpointLoad: return "load_checkpoint";
    case CallSite::kGroupSetup: return "group creation";
    case CallSite::kZeroGradients: return "ZeRO's gradient reduce-scatter";
    case CallSite::kZeroParameters: return "ZeRO's parameter all-gather";
    case CallSite::kGradNorm: return "clip_grad_norm or LARS/LAMB's trust-ratio norms";
    case CallSite::kFsdpConstructor: return "FullyShardedDataParallel's constructor";
    case CallSite::kFsdpParameters: return "FSDP's parameter all-gather";
    case CallSite::kFsdpGradients: return "FSDP's gradient reduce-scatter";
    case CallSite::kFsdpEndOfBackward: return "FSDP's end of backward";
    case CallSite::kGradScaler: return "GradScaler's overflow check";
    case CallSite::kSyncBatchNormForward: return "SyncBatchNorm's forward (batch statistics)";
    case CallSite::kSyncBatchNormBackward: return "SyncBatchNorm's backward (gradient sums)";
    case CallSite::kRegisteredMemory: return "Group::allocate_registered";
    case CallSite::kZeroConstructor: return "ZeroDataParallel's constructor";
  }
  return "";
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
