// What holds a group besides the strategy's wrapper, made to follow each generation of an
// elastic job.
//
// Note [Following the generation]
// Each generation of an ElasticTrainer has a group of its own; the last one is broken (a member
// was lost) or given up (members joined). The strategy's wrapper is made anew over the new
// group (ReplicaRun, ShardedRun), and DiLoCo's rounds adopt it (ElasticDiLoCo::adopt). The rest
// that holds a group, or state the members must hold alike, follows it here, in one place,
// before the generation's first collective:
//   - every cohort::nn::SyncBatchNorm of the module reduces over the new group (a layer left on
//     a broken group fails every step, and each failure forms one more generation: the same
//     step redone forever, 1,740 generations in 35 s as issue 58 saw it);
//   - the DDP comm hook, and DiLoCo's, drop the state the members must hold alike
//     (CommHook::on_new_group: PowerSGD's Q, which a joiner does not have).
// What cannot follow is refused by name when the trainer is made (refuse_what_cannot_follow,
// refuse_inelastic_precision): a comm hook holding a group of its own (post_local_sgd_hook's
// local group), and precision state that healing does not carry yet (float16's loss scale);
// kDdp's master weights are healed with the model (Note [Elastic master weights] in
// elastic_trainer.cc), FSDP's are its float32 shards. bfloat16 autocast holds none: it follows
// as it is. What holds no group needs nothing here: LARS and LAMB hold whole tensors under kDdp (no
// norm reduction), and the sharded strategies refuse them (their state is re-sliced by element).
// Anything else that fails the same step in every generation with every member alive ends the job
// with its cause (ElasticTrainer's recovery counts such failures) instead of looping.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "cohort/comm/group.h"
#include "cohort/torch/elastic/elastic_trainer.h"

namespace cohort::detail {

// Throws InvalidArgument naming what `options` holds that cannot follow a generation.
void refuse_what_cannot_follow(const ElasticTrainerOptions& options);

// ElasticTrainerOptions::sync_batchnorm: every BatchNorm of `module` becomes a SyncBatchNorm
// over `group` (the first generation's), keeping its tensors. Throws InvalidArgument where
// convert_sync_batchnorm cannot convert in place.
void convert_batch_norms(const std::shared_ptr<torch::nn::Module>& module,
                         const std::shared_ptr<Group>& group);

// Throws InvalidArgument for a precision the trainer does not train in yet (master weights
// under ZeRO or DiLoCo, float16's loss scaling), and for what Precision itself refuses.
void refuse_inelastic_precision(const ElasticTrainerOptions& options);

// Rebinds what `module` and `options` hold to `group`, the new generation's.
void follow_generation(torch::nn::Module& module, const std::shared_ptr<Group>& group,
                       const ElasticTrainerOptions& options);

}  // namespace cohort::detail
