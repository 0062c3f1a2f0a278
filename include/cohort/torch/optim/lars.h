// cohort::optim::Lars: SGD with momentum and a layer-wise trust ratio (You, Gitman, Ginsburg
// 2017, "Large Batch Training of Convolutional Networks"), in the form most implementations
// use: the ratio scales the decayed gradient before momentum, the learning rate stays outside
// the buffer, so that with adapt(false) it is torch::optim::SGD (momentum, nesterov,
// weight_decay, no dampening).
//
// For each parameter tensor w with gradient g, in a group with options lr, momentum (m),
// weight_decay (wd), trust_coefficient (eta), eps:
//   r = eta * ||w|| / (||g|| + wd * ||w|| + eps)  if adapt and ||w|| > 0 and ||g|| > 0, else 1
//   d = r * (g + wd * w)
//   b = m * b + d                    (b = d at the first step; no buffer when m = 0: b = d)
//   d = nesterov ? d + m * b : b
//   w = w - lr * d
// The norms are of whole tensors: over ZeRO/FSDP shards pass shard_norm_reduction()
// (trust_ratio.h). Biases and normalization weights usually get adapt(false) and
// weight_decay(0): adaptation_param_groups() (trust_ratio.h) makes those groups.
//
//   auto groups = cohort::optim::adaptation_param_groups(*model,
//       cohort::optim::LarsOptions(0.1).momentum(0.9).weight_decay(5e-4));
//   cohort::optim::Lars optimizer(std::move(groups));
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "cohort/torch/optim/trust_ratio.h"

namespace cohort::optim {

struct LarsOptions : public torch::optim::OptimizerCloneableOptions<LarsOptions> {
  LarsOptions(double lr = 0.1);  // NOLINT(google-explicit-constructor): as torch's options
  TORCH_ARG(double, lr) = 0.1;
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(bool, nesterov) = false;
  TORCH_ARG(double, weight_decay) = 0;
  TORCH_ARG(double, trust_coefficient) = 0.001;  // eta
  TORCH_ARG(double, eps) = 1e-8;
  // false: this group is plain SGD (no trust ratio).
  TORCH_ARG(bool, adapt) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override;
  void set_lr(const double lr) override;
};
bool operator==(const LarsOptions& a, const LarsOptions& b);

struct LarsParamState : public torch::optim::OptimizerCloneableParamState<LarsParamState> {
  TORCH_ARG(torch::Tensor, momentum_buffer);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lars : public TrustRatioOptimizer {
 public:
  // Throws InvalidArgument for a negative lr, momentum, weight_decay or eps, a
  // trust_coefficient <= 0, or nesterov without momentum (in any group).
  explicit Lars(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                LarsOptions defaults = {}, NormReduction reduction = {});
  explicit Lars(std::vector<torch::Tensor> params, LarsOptions defaults = {},
                NormReduction reduction = {})
      : Lars({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults),
             std::move(reduction)) {}

  // One step; collective (one allreduce) when a reduction is set and some group adapts.
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace cohort::optim
