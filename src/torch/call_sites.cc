#include "call_sites.h"

namespace cohort {
namespace call_sites {

bool register_names() {
  register_call_site(kDdpConstructor, "DistributedDataParallel's constructor");
  register_call_site(kDdpGradients, "DistributedDataParallel's gradient allreduce");
  register_call_site(kDdpUnusedParameters, "DistributedDataParallel's unused-parameter search");
  register_call_site(kDdpJoin, "DistributedDataParallel::join");
  register_call_site(kDdpBuffers, "DistributedDataParallel's buffer broadcast");
  register_call_site(kCheckpointSave, "save_checkpoint");
  register_call_site(kCheckpointLoad, "load_checkpoint");
  register_call_site(kZeroGradients, "ZeRO's gradient reduce-scatter");
  register_call_site(kZeroParameters, "ZeRO's parameter all-gather");
  register_call_site(kGradNorm, "clip_grad_norm or LARS/LAMB's trust-ratio norms");
  register_call_site(kFsdpConstructor, "FullyShardedDataParallel's constructor");
  register_call_site(kFsdpParameters, "FSDP's parameter all-gather");
  register_call_site(kFsdpGradients, "FSDP's gradient reduce-scatter");
  register_call_site(kFsdpEndOfBackward, "FSDP's end of backward");
  register_call_site(kGradScaler, "GradScaler's overflow check");
  register_call_site(kSyncBatchNormForward, "SyncBatchNorm's forward (batch statistics)");
  register_call_site(kSyncBatchNormBackward, "SyncBatchNorm's backward (gradient sums)");
  register_call_site(kZeroConstructor, "ZeroDataParallel's constructor");
  register_call_site(kElasticCommit, "ElasticTrainer's commit vote");
  register_call_site(kElasticHeal, "ElasticTrainer's healing of a new generation");
  register_call_site(kElasticBuddy, "ElasticTrainer's buddy copies");
  register_call_site(kDiLoCoConstructor, "DiLoCo's constructor");
  register_call_site(kDiLoCoRound, "DiLoCo's synchronization of a fragment");
  register_call_site(kAsyncCheckpoint, "an asynchronous checkpoint's background write");
  return true;
}

}  // namespace call_sites
}  // namespace cohort
