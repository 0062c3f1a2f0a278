// cohort::optim::Lamb: Adam with a layer-wise trust ratio (You et al. 2019, "Large Batch
// Optimization for Deep Learning: Training BERT in 76 minutes", Algorithm 2 with phi the
// identity clipped at trust_clip). With adapt(false) a group is AdamW (decoupled weight decay).
//
// For each parameter tensor w with gradient g, in a group with options lr, betas (b1, b2),
// eps, weight_decay (wd), trust_clip, at this tensor's step t (1, 2, ...):
//   m = b1 * m + (1 - b1) * g          v = b2 * v + (1 - b2) * g^2
//   u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * w
//   r = min(||w|| / ||u||, trust_clip)  if adapt and ||w|| > 0 and ||u|| > 0, else 1
//   w = w - lr * r * u
// The norms are of whole tensors: over ZeRO/FSDP shards pass shard_norm_reduction()
// (trust_ratio.h). adaptation_param_groups() (trust_ratio.h) keeps biases and normalization
// weights out of adaptation and decay.
#pragma once

#include <torch/torch.h>

#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "cohort/torch/optim/trust_ratio.h"

namespace cohort::optim {

struct LambOptions : public torch::optim::OptimizerCloneableOptions<LambOptions> {
  LambOptions(double lr = 1e-3);  // NOLINT(google-explicit-constructor): as torch's options
  TORCH_ARG(double, lr) = 1e-3;
  typedef std::tuple<double, double> betas_t;
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;
  // The largest trust ratio; infinity: not clipped.
  TORCH_ARG(double, trust_clip) = std::numeric_limits<double>::infinity();
  // false: this group is AdamW (no trust ratio).
  TORCH_ARG(bool, adapt) = true;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override;
  void set_lr(const double lr) override;
};
bool operator==(const LambOptions& a, const LambOptions& b);

struct LambParamState : public torch::optim::OptimizerCloneableParamState<LambParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);
  TORCH_ARG(torch::Tensor, exp_avg_sq);

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Lamb : public TrustRatioOptimizer {
 public:
  // Throws InvalidArgument for a negative lr, eps or weight_decay, betas outside [0, 1), or a
  // trust_clip <= 0 (in any group).
  explicit Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                LambOptions defaults = {}, NormReduction reduction = {});
  explicit Lamb(std::vector<torch::Tensor> params, LambOptions defaults = {},
                NormReduction reduction = {})
      : Lamb({torch::optim::OptimizerParamGroup(std::move(params))}, std::move(defaults),
             std::move(reduction)) {}

  // One step; collective (one allreduce) when a reduction is set and some group adapts.
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace cohort::optim
