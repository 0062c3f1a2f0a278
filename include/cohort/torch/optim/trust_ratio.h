// What LARS and LAMB (cohort/torch/optim/lars.h, lamb.h) share: the reduction that makes
// whole-parameter norms out of shards, their common base class, and the helper that keeps
// biases and normalization weights out of the trust ratio (docs/large_batch.md, "LARS and
// LAMB").
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cohort/torch/sharded_parameters.h"

namespace cohort {
namespace optim {

// Sums, in place, a float64 CPU tensor of per-parameter squared norms over the ranks whose
// shards together make each parameter whole. LARS and LAMB call it once per step() with every
// norm that step needs (||w||^2 and ||g||^2 or ||u||^2 of every adapted parameter), so it is
// one allreduce per step() call. Empty: the optimizer holds whole tensors (one process, DDP).
using NormReduction = std::function<void(torch::Tensor& squared_norms)>;

// The reduction for an optimizer built over a wrapper's parameters() (pass the wrapper, or its
// sharded_parameters()): a sum over the view's norm_group. ZeroDataParallel: its group
// (ZeroDataParallel::step runs the optimizer once per bucket at world size > 1, so it is one
// allreduce per bucket). FullyShardedDataParallel: its shard_group() (under kHybridShard the
// ranks of this node; the other nodes hold replicas of the same shards and must not be counted
// again); kNoShard: empty (the optimizer holds whole parameters). It refers to the wrapper's
// group: do not use it after the wrapper is gone.
NormReduction shard_norm_reduction(const ShardedParameters& sharded);

// The base of Lars and Lamb: a torch optimizer with a NormReduction. ZeroDataParallel::step and
// FullyShardedDataParallel::step refuse one without a reduction when the shards are spread over
// more than one rank (the trust ratios would be of each rank's part of a parameter).
class TrustRatioOptimizer : public torch::optim::Optimizer {
 public:
  void set_norm_reduction(NormReduction reduction) { reduction_ = std::move(reduction); }
  const NormReduction& norm_reduction() const { return reduction_; }

 protected:
  TrustRatioOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                      std::unique_ptr<torch::optim::OptimizerOptions> defaults,
                      NormReduction reduction)
      : Optimizer(std::move(param_groups), std::move(defaults)), reduction_(std::move(reduction)) {}
  // The closure's loss, evaluated with gradients on (as torch's optimizers do); undefined
  // without a closure.
  static torch::Tensor evaluate(const LossClosure& closure);
  // `squared_norms` (any device) summed by the reduction, on the CPU in float64.
  torch::Tensor reduce_norms(const std::vector<torch::Tensor>& squared_norms) const;

 private:
  NormReduction reduction_;
};

// Decides from a parameter's name and the parameter itself (whole, as the module holds it)
// whether it is excluded from adaptation and weight decay.
using ExcludeRule = std::function<bool(const std::string& name, const torch::Tensor& parameter)>;
// The usual rule: tensors of at most one dimension (biases, BatchNorm/LayerNorm weights and
// biases) are excluded.
bool exclude_one_dimensional(const std::string& name, const torch::Tensor& parameter);

// The tensors an optimizer steps, split by `exclude`. `parameters`: what the optimizer will
// hold, by name: module.named_parameters(), or zero.named_parameters() /
// fsdp.named_parameters() (1-D shards). The rule sees the module's own parameter of that name,
// never the shard: a shard of a weight matrix is 1-D too, and would otherwise count as a bias.
// A name that is not a parameter of `module` is an InvalidArgument.
struct AdaptationSplit {
  std::vector<torch::Tensor> adapted;
  std::vector<torch::Tensor> excluded;
};
AdaptationSplit split_for_adaptation(
    const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    const torch::nn::Module& module, const ExcludeRule& exclude = exclude_one_dimensional);

// Two param groups, always in this order and both present (possibly empty, so that group
// indices do not depend on the model): 0, the adapted tensors with `options`; 1, the excluded
// ones with `options` but adapt(false) and weight_decay(0). Options: LarsOptions or
// LambOptions.
//   auto groups = cohort::optim::adaptation_param_groups(zero.named_parameters(),
//                                                        zero.module(), LambOptions(1e-3));
template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> adaptation_param_groups(
    const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    const torch::nn::Module& module, const Options& options,
    const ExcludeRule& exclude = exclude_one_dimensional) {
  AdaptationSplit split = split_for_adaptation(parameters, module, exclude);
  Options plain = options;
  plain.adapt(false).weight_decay(0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::move(split.adapted), std::make_unique<Options>(options));
  groups.emplace_back(std::move(split.excluded), std::make_unique<Options>(plain));
  return groups;
}

// The same for one process or DistributedDataParallel: the module's parameters that require
// grad, by their names.
template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> adaptation_param_groups(
    const torch::nn::Module& module, const Options& options,
    const ExcludeRule& exclude = exclude_one_dimensional) {
  torch::OrderedDict<std::string, torch::Tensor> trainable;
  for (const auto& item : module.named_parameters()) {
    if (item.value().requires_grad()) trainable.insert(item.key(), item.value());
  }
  return adaptation_param_groups(trainable, module, options, exclude);
}

}  // namespace optim
}  // namespace cohort
