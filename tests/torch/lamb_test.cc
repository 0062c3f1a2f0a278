// cohort::optim::Lamb (cohort/torch/optim/lamb.h) against a reference written from the paper's
// update rule, against torch's AdamW without adaptation, under DDP, ZeRO and FSDP against one
// process, through save/load and checkpoints, and its refusals.
#include "cohort/torch/optim/lamb.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "checkpoint_files.h"
#include "cohort/core/error.h"
#include "ddp_harness.h"
#include "trust_ratio_harness.h"

namespace cohort::testing {
namespace lamb_test {

using optim::Lamb;
using optim::LambOptions;

// ---- the reference: You et al. 2019, Algorithm 2 (LAMB) with phi(z) = min(z, trust_clip), in
// float64.
struct ReferenceGroup {
  std::vector<std::string> names;
  LambOptions options;
};

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

std::vector<torch::optim::OptimizerParamGroup> param_groups(
    torch::nn::Module& model, const std::vector<ReferenceGroup>& groups) {
  auto named = model.named_parameters();
  std::vector<torch::optim::OptimizerParamGroup> out;
  for (const auto& group : groups) {
    std::vector<torch::Tensor> params;
    for (const auto& name : group.names) params.push_back(named[name]);
    out.emplace_back(params, std::make_unique<LambOptions>(group.options));
  }
  return out;
}

void train(torch::nn::Sequential& model, int first, int last, const std::function<void()>& step) {
  for (int s = first; s < last; ++s) {
    auto [inputs, targets] = trust_ratio_batch(s, 12);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    const auto dtype = model->parameters().front().scalar_type();
    trust_ratio_loss(model, inputs.to(dtype), targets.to(dtype)).backward();
    step();
  }
}

std::vector<torch::Tensor> parameters_of(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone().to(torch::kFloat32));
  return out;
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

void expect_refused(const LambOptions& options, const std::string& words) {
  auto model = trust_ratio_model();
  try {
    Lamb optimizer(model->parameters(), options);
    ADD_FAILURE() << "no error; expected one about " << words;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Lamb, RefusesBadOptionsByName) {
  expect_refused(LambOptions(-1e-3), "Lamb: lr must be >= 0, got -0.001 (param group 0)");
  expect_refused(LambOptions().eps(-1), "eps must be >= 0");
  expect_refused(LambOptions().weight_decay(-0.1), "weight_decay must be >= 0");
  expect_refused(LambOptions().betas(std::make_tuple(1.0, 0.999)), "betas[0] must be in [0, 1)");
  expect_refused(LambOptions().betas(std::make_tuple(0.9, -0.1)), "betas[1] must be in [0, 1)");
  expect_refused(LambOptions().trust_clip(0), "trust_clip must be > 0");
  auto model = trust_ratio_model();
  Lamb optimizer(param_groups(*model, three_groups()));
  static_cast<LambOptions&>(optimizer.param_groups()[2].options()).weight_decay(-1);
  EXPECT_THROW(train(model, 0, 1, [&] { optimizer.step(); }), InvalidArgument);
}

TEST(Lamb, SavedAndLoadedStateContinuesIdentically) {
  auto model = trust_ratio_model();
  Lamb optimizer(param_groups(*model, three_groups()));
  train(model, 0, 3, [&] { optimizer.step(); });
  std::stringstream saved;
  torch::save(optimizer, saved);

  auto restored = trust_ratio_model();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) {
      restored->parameters()[i].copy_(model->parameters()[i]);
    }
  }
  Lamb loaded(param_groups(*restored, three_groups()));
  torch::load(loaded, saved);
  train(model, 3, 6, [&] { optimizer.step(); });
  train(restored, 3, 6, [&] { loaded.step(); });
  const auto got = parameters_of(*restored), want = parameters_of(*model);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

// ---- multi-rank

MakeOptimizer make_lamb() {
  return [](const torch::OrderedDict<std::string, torch::Tensor>& named,
            const torch::nn::Module& module, optim::NormReduction reduction) {
    auto options = LambOptions(0.02).weight_decay(1e-2).trust_clip(5.0);
    return std::make_unique<Lamb>(optim::adaptation_param_groups(named, module, options),
                                  LambOptions(), std::move(reduction));
  };
}

TrainCase lamb_case(Wrap wrap, int world) {
  TrainCase c;
  c.wrap = wrap;
  c.world = world;
  c.make_optimizer = make_lamb();
  return c;
}

// Tolerance: as for LARS (lars_test.cc); Adam's division by small second moments magnifies the
// rounding of gradients near zero a little more.
constexpr double kRtol = 2e-4, kAtol = 1e-5;

TEST(LambParity, DdpMatchesOneProcess) {
  const auto expected = train_case(lamb_case(Wrap::kOneProcess, 1));
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_close(train_case(lamb_case(Wrap::kDdp, world)), expected, kRtol, kAtol);
  }
}

class LambShardedParity : public ::testing::TestWithParam<Wrap> {};

TEST_P(LambShardedParity, MatchesOneProcessWithTheNormReduction) {
  const auto expected = train_case(lamb_case(Wrap::kOneProcess, 1));
  for (int world : {2, 3}) {
    SCOPED_TRACE(std::string(wrap_name(GetParam())) + " at world " + std::to_string(world));
    expect_close(train_case(lamb_case(GetParam(), world)), expected, kRtol, kAtol);
  }
}

TEST_P(LambShardedParity, RefusesToStepShardsWithoutTheReduction) {
  expect_refused_without_reduction(lamb_case(GetParam(), 2));
}

INSTANTIATE_TEST_SUITE_P(Wrappers, LambShardedParity,
                         ::testing::Values(Wrap::kZero1, Wrap::kZero2, Wrap::kFullShard),
                         [](const auto& param_info) { return wrap_test_name(param_info.param); });

TEST(LambParity, HybridShardMatchesOneProcess) {
  auto c = lamb_case(Wrap::kHybridShard, 4);
  c.node_of = {"a", "a", "b", "b"};
  expect_close(train_case(c), train_case(lamb_case(Wrap::kOneProcess, 1)), kRtol, kAtol);
}

TEST(LambParity, CheckpointsContinueIdentically) {
  for (Wrap wrap : {Wrap::kDdp, Wrap::kZero1, Wrap::kFullShard}) {
    SCOPED_TRACE(wrap_name(wrap));
    TempDir dir;
    auto whole = lamb_case(wrap, 2);
    whole.steps = 6;
    const auto expected = train_case(whole);
    auto first = whole;
    first.steps = 3;
    first.save_to = wrap == Wrap::kDdp ? dir.file("ddp.ckpt") : dir.file("sharded");
    train_case(first);
    auto second = whole;
    second.first_step = 3;
    second.load_from = first.save_to;
    expect_close(train_case(second), expected, 0, 0);
  }
}

}  // namespace lamb_test
}  // namespace cohort::testing
