// cohort::optim::Lars (cohort/torch/optim/lars.h): the update rule is written out there.
#include "cohort/torch/optim/lars.h"

#include <cmath>

#include "optim/trust_ratio.h"

namespace cohort::optim {

LarsOptions::LarsOptions(double lr) : lr_(lr) {}

double LarsOptions::get_lr() const {
  return lr();
}

void LarsOptions::set_lr(const double lr) {
  this->lr(lr);
}

bool operator==(const LarsOptions& a, const LarsOptions& b) {
  return a.lr() == b.lr() && a.momentum() == b.momentum() && a.nesterov() == b.nesterov() &&
         a.weight_decay() == b.weight_decay() && a.trust_coefficient() == b.trust_coefficient() &&
         a.eps() == b.eps() && a.adapt() == b.adapt();
}

void LarsOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(nesterov);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_coefficient);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adapt);
}

void LarsOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, momentum);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, nesterov);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_coefficient);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adapt);
}

void LarsParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(momentum_buffer);
}

void LarsParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, momentum_buffer);
}

namespace {

void check_options(const LarsOptions& o, size_t group) {
  using detail::check_option;
  check_option(o.lr() >= 0, "Lars", "lr must be >= 0", o.lr(), group);
  check_option(o.momentum() >= 0, "Lars", "momentum must be >= 0", o.momentum(), group);
  check_option(o.weight_decay() >= 0, "Lars", "weight_decay must be >= 0", o.weight_decay(), group);
  check_option(o.trust_coefficient() > 0, "Lars", "trust_coefficient (eta) must be > 0",
               o.trust_coefficient(), group);
  check_option(o.eps() >= 0, "Lars", "eps must be >= 0", o.eps(), group);
  check_option(!o.nesterov() || o.momentum() > 0, "Lars", "nesterov needs momentum > 0",
               o.momentum(), group);
}

void check_lars_groups(const torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    check_options(static_cast<const LarsOptions&>(groups[g].options()), g);
  }
}

// eta * ||w|| / (||g|| + wd * ||w|| + eps), or 1 when a norm is 0.
double trust_ratio(const LarsOptions& o, double w_norm, double g_norm) {
  if (w_norm <= 0 || g_norm <= 0) return 1.0;
  return o.trust_coefficient() * w_norm / (g_norm + o.weight_decay() * w_norm + o.eps());
}

}  // namespace

Lars::Lars(std::vector<torch::optim::OptimizerParamGroup> param_groups, LarsOptions defaults,
           NormReduction reduction)
    : TrustRatioOptimizer(std::move(param_groups), std::make_unique<LarsOptions>(defaults),
                          std::move(reduction)) {
  check_lars_groups(*this);
}

torch::Tensor Lars::step(LossClosure closure) {
  const torch::Tensor loss = evaluate(closure);
  torch::NoGradGuard no_grad;
  check_lars_groups(*this);  // a schedule or the caller may have changed them since
  // Note [One allreduce per step] (trust_ratio.cc): ||w||^2 of every adapted tensor, then
  // ||g||^2 of each.
  std::vector<torch::Tensor> weights, grads;
  for (auto& group : param_groups()) {
    if (!static_cast<LarsOptions&>(group.options()).adapt()) continue;
    for (const auto& p : group.params()) {
      weights.push_back(detail::squared_norm(p));
      grads.push_back(detail::squared_norm(p.grad()));
    }
  }
  const size_t adapted = weights.size();
  weights.insert(weights.end(), grads.begin(), grads.end());
  const torch::Tensor norms = reduce_norms(weights);
  const double* squared = norms.data_ptr<double>();

  size_t k = 0;  // index of the next adapted tensor in `squared`
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const LarsOptions&>(group.options());
    for (auto& p : group.params()) {
      double ratio = 1.0;
      if (o.adapt()) {
        ratio = trust_ratio(o, std::sqrt(squared[k]), std::sqrt(squared[adapted + k]));
        ++k;
      }
      if (!p.grad().defined()) continue;
      torch::Tensor d = p.grad();
      if (o.weight_decay() != 0) d = d.add(p, o.weight_decay());
      if (ratio != 1.0) d = d.mul(ratio);
      if (o.momentum() != 0) {
        auto* state = detail::state_for<LarsParamState>(*this, p);
        torch::Tensor buffer = state->momentum_buffer();
        if (!buffer.defined()) {
          buffer = d.clone().detach();
          state->momentum_buffer(buffer);
        } else {
          buffer.mul_(o.momentum()).add_(d);
        }
        d = o.nesterov() ? d.add(buffer, o.momentum()) : buffer;
      }
      p.add_(d, -o.lr());
    }
  }
  return loss;
}

void Lars::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

void Lars::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LarsParamState, LarsOptions>(archive, *this);
}

}  // namespace cohort::optim
