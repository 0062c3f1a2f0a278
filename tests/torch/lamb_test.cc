// cohort::optim::Lamb (cohort/torch/optim/lamb.h) against a reference written from the paper's
// update rule, against torch's AdamW without adaptation, under DDP, ZeRO and FSDP against one
// process, through save/load and checkpoints, and its refusals.
#include "cohort/torch/optim/lamb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "cohort/core/error.h"
#include "ddp_harness.h"
#include "trust_ratio_harness.h"

namespace cohort::testing {
namespace lamb_test {

using optim::Lamb;
using optim::LambOptions;

// ---- the reference: You et al. 2019, Algorithm 2 (LAMB) with phi(z) = min(z, trust_clip), in
// float64.
using ReferenceGroup = NamedGroup<LambOptions>;

class ReferenceLamb {
 public:
  explicit ReferenceLamb(std::vector<ReferenceGroup> groups) : groups_(std::move(groups)) {}
  void step(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    ++t_;
    auto named = model.named_parameters();
    for (const auto& group : groups_) {
      const LambOptions& o = group.options;
      const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
      for (const auto& name : group.names) {
        torch::Tensor w = named[name];
        torch::Tensor g = w.grad();
        auto& [m, v] = moments_[name];
        if (!m.defined()) {
          m = torch::zeros_like(w);
          v = torch::zeros_like(w);
        }
        m = b1 * m + (1 - b1) * g;
        v = b2 * v + (1 - b2) * g * g;
        torch::Tensor m_hat = m / (1 - std::pow(b1, t_));
        torch::Tensor v_hat = v / (1 - std::pow(b2, t_));
        torch::Tensor r = m_hat / (v_hat.sqrt() + o.eps());
        torch::Tensor u = r + o.weight_decay() * w;
        const double w_norm = w.norm().item<double>();
        const double u_norm = u.norm().item<double>();
        double ratio = 1.0;
        if (o.adapt() && w_norm > 0 && u_norm > 0) {
          ratio = std::min(w_norm / u_norm, o.trust_clip());
        }
        w.sub_(o.lr() * ratio * u);
      }
    }
  }

 private:
  std::vector<ReferenceGroup> groups_;
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> moments_;
  int t_ = 0;
};

// Three groups: two adapted (one with its trust ratio clipped), one (the biases) plain.
std::vector<ReferenceGroup> three_groups() {
  return {{{"0.weight", "2.weight"}, LambOptions(0.02).weight_decay(1e-2)},
          {{"4.weight"},
           LambOptions(0.01)
               .betas(std::make_tuple(0.8, 0.99))
               .eps(1e-4)
               .weight_decay(0.1)
               .trust_clip(0.5)},
          {{"0.bias", "2.bias", "4.bias"}, LambOptions(0.005).weight_decay(0).adapt(false)}};
}

TEST(Lamb, MatchesThePaperRuleOverStepsAndParamGroups) {
  auto model = trust_ratio_model();
  auto reference = trust_ratio_model();
  reference->to(torch::kFloat64);
  Lamb optimizer(param_groups(*model, three_groups()));
  ReferenceLamb expected(three_groups());
  for (int s = 0; s < 6; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    train(model, s, s + 1, [&] { optimizer.step(); });
    train(reference, s, s + 1, [&] { expected.step(*reference); });
    expect_close(parameters_of(*model), parameters_of(*reference), 1e-4, 1e-6);
  }
  // The clip did act: without it group 1 ends elsewhere.
  auto unclipped_model = trust_ratio_model();
  auto groups = three_groups();
  groups[1].options.trust_clip(std::numeric_limits<double>::infinity());
  Lamb unclipped(param_groups(*unclipped_model, groups));
  train(unclipped_model, 0, 6, [&] { unclipped.step(); });
  const auto clipped = parameters_of(*model), free = parameters_of(*unclipped_model);
  EXPECT_GT((clipped[4] - free[4]).abs().max().item<double>(), 1e-4);  // "4.weight"
  EXPECT_TRUE(torch::equal(clipped[0], free[0]));                      // "0.weight": no clip
}

// adapt(false) is AdamW (decoupled weight decay); not bit for bit: the two order the bias
// corrections differently.
TEST(Lamb, WithoutAdaptationIsTorchAdamW) {
  auto model = trust_ratio_model();
  auto twin = trust_ratio_model();
  Lamb lamb(model->parameters(), LambOptions(0.01).eps(1e-8).weight_decay(0.05).adapt(false));
  torch::optim::AdamW adamw(twin->parameters(),
                            torch::optim::AdamWOptions(0.01).eps(1e-8).weight_decay(0.05));
  train(model, 0, 6, [&] { lamb.step(); });
  train(twin, 0, 6, [&] { adamw.step(); });
  expect_close(parameters_of(*model), parameters_of(*twin), 1e-5, 1e-7);
}

TEST(Lamb, RefusesBadOptionsByName) {
  expect_refused<Lamb>(LambOptions(-1e-3), "Lamb: lr must be >= 0, got -0.001 (param group 0)");
  expect_refused<Lamb>(LambOptions().eps(-1), "eps must be >= 0");
  expect_refused<Lamb>(LambOptions().weight_decay(-0.1), "weight_decay must be >= 0");
  expect_refused<Lamb>(LambOptions().betas(std::make_tuple(1.0, 0.999)),
                       "betas[0] must be in [0, 1)");
  expect_refused<Lamb>(LambOptions().betas(std::make_tuple(0.9, -0.1)),
                       "betas[1] must be in [0, 1)");
  expect_refused<Lamb>(LambOptions().trust_clip(0), "trust_clip must be > 0");
  auto model = trust_ratio_model();
  Lamb optimizer(param_groups(*model, three_groups()));
  static_cast<LambOptions&>(optimizer.param_groups()[2].options()).weight_decay(-1);
  EXPECT_THROW(train(model, 0, 1, [&] { optimizer.step(); }), InvalidArgument);
}

TEST(Lamb, SavedAndLoadedStateContinuesIdentically) {
  expect_saved_state_continues<Lamb>(three_groups());
}

// The multi-rank parity and checkpoint cases are in trust_ratio_parity_test.cc.

}  // namespace lamb_test
}  // namespace cohort::testing
