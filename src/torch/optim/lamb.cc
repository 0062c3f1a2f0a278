// cohort::optim::Lamb (cohort/torch/optim/lamb.h): the update rule is written out there.
#include "cohort/torch/optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "optim/trust_ratio.h"

namespace cohort::optim {

LambOptions::LambOptions(double lr) : lr_(lr) {}

double LambOptions::get_lr() const {
  return lr();
}

void LambOptions::set_lr(const double lr) {
  this->lr(lr);
}

bool operator==(const LambOptions& a, const LambOptions& b) {
  return a.lr() == b.lr() && a.betas() == b.betas() && a.eps() == b.eps() &&
         a.weight_decay() == b.weight_decay() && a.trust_clip() == b.trust_clip() &&
         a.adapt() == b.adapt();
}

void LambOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(betas);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(trust_clip);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(adapt);
}

void LambOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(betas_t, betas);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, trust_clip);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(bool, adapt);
}

void LambParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(exp_avg_sq);
}

void LambParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(torch::Tensor, exp_avg_sq);
}

namespace {

void check_options(const LambOptions& o, size_t group) {
  using detail::check_option;
  const auto [beta1, beta2] = o.betas();
  check_option(o.lr() >= 0, "Lamb", "lr must be >= 0", o.lr(), group);
  check_option(o.eps() >= 0, "Lamb", "eps must be >= 0", o.eps(), group);
  check_option(o.weight_decay() >= 0, "Lamb", "weight_decay must be >= 0", o.weight_decay(), group);
  check_option(beta1 >= 0 && beta1 < 1, "Lamb", "betas[0] must be in [0, 1)", beta1, group);
  check_option(beta2 >= 0 && beta2 < 1, "Lamb", "betas[1] must be in [0, 1)", beta2, group);
  check_option(o.trust_clip() > 0, "Lamb", "trust_clip must be > 0 (infinity: no clipping)",
               o.trust_clip(), group);
}

void check_lamb_groups(const torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    check_options(static_cast<const LambOptions&>(groups[g].options()), g);
  }
}

// min(||w|| / ||u||, trust_clip), or 1 when a norm is 0.
double trust_ratio(const LambOptions& o, double w_norm, double u_norm) {
  if (w_norm <= 0 || u_norm <= 0) return 1.0;
  return std::min(w_norm / u_norm, o.trust_clip());
}

// Advances the moments of `p` by its gradient and returns the update direction u.
torch::Tensor adam_direction(LambParamState& state, const torch::Tensor& p, const LambOptions& o) {
  const auto [beta1, beta2] = o.betas();
  if (!state.exp_avg().defined()) {
    state.exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state.exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
  }
  state.step(state.step() + 1);
  const torch::Tensor& g = p.grad();
  state.exp_avg().mul_(beta1).add_(g, 1 - beta1);
  state.exp_avg_sq().mul_(beta2).addcmul_(g, g, 1 - beta2);
  const double correction1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
  const double correction2 = 1 - std::pow(beta2, static_cast<double>(state.step()));
  torch::Tensor denominator = (state.exp_avg_sq() / correction2).sqrt_().add_(o.eps());
  torch::Tensor u = (state.exp_avg() / correction1).div_(denominator);
  if (o.weight_decay() != 0) u.add_(p, o.weight_decay());
  return u;
}

}  // namespace

Lamb::Lamb(std::vector<torch::optim::OptimizerParamGroup> param_groups, LambOptions defaults,
           NormReduction reduction)
    : TrustRatioOptimizer(std::move(param_groups), std::make_unique<LambOptions>(defaults),
                          std::move(reduction)) {
  check_lamb_groups(*this);
}

torch::Tensor Lamb::step(LossClosure closure) {
  const torch::Tensor loss = evaluate(closure);
  torch::NoGradGuard no_grad;
  check_lamb_groups(*this);  // a schedule or the caller may have changed them since
  // The directions first (they need the moments), then, Note [One allreduce per step]
  // (trust_ratio.cc), ||w||^2 of every adapted tensor followed by ||u||^2 of each.
  std::vector<std::vector<torch::Tensor>> directions;
  std::vector<torch::Tensor> weights, updates;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const LambOptions&>(group.options());
    directions.emplace_back();
    for (const auto& p : group.params()) {
      torch::Tensor u;
      if (p.grad().defined())
        u = adam_direction(*detail::state_for<LambParamState>(*this, p), p, o);
      if (o.adapt()) {
        weights.push_back(detail::squared_norm(p));
        updates.push_back(detail::squared_norm(u));
      }
      directions.back().push_back(std::move(u));
    }
  }
  const size_t adapted = weights.size();
  weights.insert(weights.end(), updates.begin(), updates.end());
  const torch::Tensor norms = reduce_norms(weights);
  const double* squared = norms.data_ptr<double>();

  size_t k = 0;  // index of the next adapted tensor in `squared`
  auto& groups = param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& o = static_cast<const LambOptions&>(groups[g].options());
    auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      double ratio = 1.0;
      if (o.adapt()) {
        ratio = trust_ratio(o, std::sqrt(squared[k]), std::sqrt(squared[adapted + k]));
        ++k;
      }
      const torch::Tensor& u = directions[g][i];
      if (u.defined()) params[i].add_(u, -o.lr() * ratio);
    }
  }
  return loss;
}

void Lamb::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

void Lamb::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<LambParamState, LambOptions>(archive, *this);
}

}  // namespace cohort::optim
