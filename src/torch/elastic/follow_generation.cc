#include "elastic/follow_generation.h"

#include "cohort/core/error.h"
#include "cohort/torch/nn/sync_batch_norm.h"

namespace cohort::detail {

void refuse_what_cannot_follow(const ElasticTrainerOptions& options) {
  const auto& hook = options.ddp.comm_hook;
  if (hook && hook->name() == "post_local_sgd") {
    throw InvalidArgument(
        "ElasticTrainer: DdpOptions::comm_hook is post_local_sgd_hook, which holds a local group "
        "made from one generation's group and cannot follow the next; local SGD is not elastic "
        "(use ElasticTrainerOptions::diloco, or leave the hook out)");
  }
}

// Master weights follow the generation under kDdp, where the trainer makes the optimizer over
// the float32 masters, heals them from rank 0 and checkpoints them (Note [Elastic master
// weights]), and under FSDP's strategies, whose float32 shards are the masters (a 16-bit
// param_dtype: the pieces, buddy copies and checkpoints are the shards). ZeRO keeps no masters
// (make_strategy refuses it there too); DiLoCo averages the model's own parameters. Float16
// needs a loss scale that every member holds alike.
void refuse_inelastic_precision(const ElasticTrainerOptions& options) {
  const PrecisionOptions& precision = options.precision;
  Precision checked(precision);  // its own refusals (float16 on a CPU, ...)
  if (precision.master_weights && is_zero(options.strategy)) {
    throw InvalidArgument(
        std::string("ElasticTrainer: master weights (PrecisionOptions::master_weights; "
                    "--master-weights) are not available under ") +
        strategy_name(options.strategy) +
        " (ZeRO shards the model's own parameters and keeps no float32 copy): use ddp or an "
        "FSDP strategy, whose float32 shards are the masters");
  }
  if (precision.master_weights && options.diloco) {
    throw InvalidArgument(
        "ElasticTrainer: DiLoCo (ElasticTrainerOptions::diloco) averages the model's own "
        "parameters, and master weights (--master-weights) keep the optimizer's in float32 "
        "masters: give one of them");
  }
  if (precision.compute_dtype == torch::kFloat16) {
    throw InvalidArgument(
        "ElasticTrainer does not train in float16 yet (its loss scale is not healed): use "
        "bfloat16 (docs/elastic.md, \"Strategies and options\")");
  }
}

void convert_batch_norms(const std::shared_ptr<torch::nn::Module>& module,
                         const std::shared_ptr<Group>& group) {
  if (nn::convert_sync_batchnorm(module, group) != module) {
    throw InvalidArgument(
        "ElasticTrainerOptions::sync_batchnorm: the module is itself a BatchNorm, which cannot "
        "be converted in place; hold it in a torch::nn::Sequential");
  }
  for (const auto& layer : module->modules()) {
    if (std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(layer)) return;
  }
  throw InvalidArgument(
      "ElasticTrainerOptions::sync_batchnorm (--sync-bn): the model has no BatchNorm to "
      "synchronize");
}

void follow_generation(torch::nn::Module& module, const std::shared_ptr<Group>& group,
                       const ElasticTrainerOptions& options) {
  for (const auto& layer : module.modules(/*include_self=*/true)) {
    if (auto* sync = dynamic_cast<nn::SyncBatchNormImpl*>(layer.get())) sync->set_group(group);
  }
  if (options.ddp.comm_hook) options.ddp.comm_hook->on_new_group();
  if (options.diloco && options.diloco->hook) options.diloco->hook->on_new_group();
}

}  // namespace cohort::detail
