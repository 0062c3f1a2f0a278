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

// Master weights hold the model in 16 bits beside float32 copies that the healing and the
// checkpoints do not carry yet; float16 needs a loss scale that every member holds alike.
void refuse_inelastic_precision(const PrecisionOptions& precision) {
  Precision checked(precision);  // its own refusals (float16 on a CPU, ...)
  if (precision.master_weights) {
    throw InvalidArgument(
        "ElasticTrainer does not train with master weights (PrecisionOptions::master_weights; "
        "--master-weights) yet: use bfloat16 autocast over float32 parameters (docs/elastic.md, "
        "\"Strategies and options\")");
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
