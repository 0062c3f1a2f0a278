// cohort::optim::Lars (cohort/torch/optim/lars.h) against a reference written from the paper's
// update rule, against torch's SGD without adaptation, under DDP, ZeRO and FSDP against one
// process, through save/load and checkpoints, and its refusals.
#include "cohort/torch/optim/lars.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "checkpoint_files.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"
#include "trust_ratio_harness.h"

namespace cohort::testing {
namespace lars_test {

using optim::Lars;
using optim::LarsOptions;

// ---- the reference: You et al. 2017, Algorithm 1, with the trust ratio scaling the decayed
// gradient before momentum and the learning rate outside the buffer (lars.h), in float64.
using ReferenceGroup = NamedGroup<LarsOptions>;

class ReferenceLars {
 public:
  explicit ReferenceLars(std::vector<ReferenceGroup> groups) : groups_(std::move(groups)) {}
  void step(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    auto named = model.named_parameters();
    for (const auto& group : groups_) {
      const LarsOptions& o = group.options;
      for (const auto& name : group.names) {
        torch::Tensor w = named[name];
        torch::Tensor g = w.grad();
        const double w_norm = w.norm().item<double>();
        const double g_norm = g.norm().item<double>();
        double local = 1.0;
        if (o.adapt() && w_norm > 0 && g_norm > 0) {
          local = o.trust_coefficient() * w_norm / (g_norm + o.weight_decay() * w_norm + o.eps());
        }
        torch::Tensor d = (g + o.weight_decay() * w) * local;
        auto it = buffers_.find(name);
        if (it == buffers_.end()) {
          it = buffers_.emplace(name, d.clone()).first;
        } else {
          it->second = o.momentum() * it->second + d;
        }
        torch::Tensor direction = o.nesterov() ? d + o.momentum() * it->second : it->second;
        w.sub_(o.lr() * direction);
      }
    }
  }

 private:
  std::vector<ReferenceGroup> groups_;
  std::map<std::string, torch::Tensor> buffers_;
};

// Three groups of different options: two adapted, one (the biases) plain.
std::vector<ReferenceGroup> three_groups() {
  return {
      {{"0.weight", "2.weight"},
       LarsOptions(0.5).momentum(0.9).weight_decay(1e-2).trust_coefficient(0.02)},
      {{"4.weight"},
       LarsOptions(0.3).momentum(0.8).nesterov(true).weight_decay(5e-3).trust_coefficient(0.05).eps(
           1e-3)},
      {{"0.bias", "2.bias", "4.bias"},
       LarsOptions(0.05).momentum(0.9).weight_decay(0).adapt(false)}};
}

TEST(Lars, MatchesThePaperRuleOverStepsAndParamGroups) {
  auto model = trust_ratio_model();
  auto reference = trust_ratio_model();
  reference->to(torch::kFloat64);
  Lars optimizer(param_groups(*model, three_groups()));
  ReferenceLars expected(three_groups());
  for (int s = 0; s < 6; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    train(model, s, s + 1, [&] { optimizer.step(); });
    train(reference, s, s + 1, [&] { expected.step(*reference); });
    // float32 against float64 over a few steps.
    expect_close(parameters_of(*model), parameters_of(*reference), 1e-4, 1e-6);
  }
  // The trust ratio did act: plain SGD with the same options ends elsewhere.
  auto plain = trust_ratio_model();
  auto groups = three_groups();
  for (auto& group : groups) group.options.adapt(false);
  Lars sgd(param_groups(*plain, groups));
  train(plain, 0, 6, [&] { sgd.step(); });
  EXPECT_GT((parameters_of(*plain)[0] - parameters_of(*model)[0]).abs().max().item<double>(), 1e-3);
}

// adapt(false) is torch::optim::SGD (momentum, nesterov, weight decay), bit for bit.
TEST(Lars, WithoutAdaptationIsTorchSgd) {
  for (bool nesterov : {false, true}) {
    auto model = trust_ratio_model();
    auto twin = trust_ratio_model();
    Lars lars(model->parameters(),
              LarsOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(1e-2).adapt(false));
    torch::optim::SGD sgd(
        twin->parameters(),
        torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(nesterov).weight_decay(1e-2));
    train(model, 0, 5, [&] { lars.step(); });
    train(twin, 0, 5, [&] { sgd.step(); });
    const auto got = parameters_of(*model), want = parameters_of(*twin);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
  }
}

TEST(Lars, AdaptationGroupsDecideByTheWholeParameter) {
  auto model = trust_ratio_model();
  auto groups = optim::adaptation_param_groups(*model, LarsOptions(0.2).weight_decay(1e-3));
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params().size(), 3u);  // the weights
  EXPECT_EQ(groups[1].params().size(), 3u);  // the biases
  for (const auto& p : groups[0].params()) EXPECT_EQ(p.dim(), 2);
  const auto& adapted = static_cast<const LarsOptions&>(groups[0].options());
  const auto& excluded = static_cast<const LarsOptions&>(groups[1].options());
  EXPECT_TRUE(adapted.adapt());
  EXPECT_EQ(adapted.weight_decay(), 1e-3);
  EXPECT_FALSE(excluded.adapt());
  EXPECT_EQ(excluded.weight_decay(), 0);
  EXPECT_EQ(excluded.lr(), 0.2);

  // ZeRO's shards are all 1-D: the module's parameters decide.
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto net = trust_ratio_model();
    ZeroDataParallel zero(net, group);
    auto sharded =
        optim::adaptation_param_groups(zero.named_parameters(), zero.module(), LarsOptions(0.2));
    ASSERT_EQ(sharded.size(), 2u);
    EXPECT_EQ(sharded[0].params().size(), 3u);
    EXPECT_EQ(sharded[1].params().size(), 3u);
    for (const auto& p : sharded[0].params()) EXPECT_EQ(p.dim(), 1);
  });

  // A model without biases: the excluded group is there, empty, and stepping works.
  torch::nn::Linear no_bias(torch::nn::LinearOptions(3, 2).bias(false));
  Lars stepped(optim::adaptation_param_groups(*no_bias, LarsOptions(0.1)));
  ASSERT_EQ(stepped.param_groups().size(), 2u);
  EXPECT_TRUE(stepped.param_groups()[1].params().empty());
  const torch::Tensor before = no_bias->weight.detach().clone();
  no_bias->forward(torch::ones({4, 3})).sum().backward();
  stepped.step();
  EXPECT_FALSE(torch::equal(no_bias->weight, before));

  // A custom rule, and a name the module does not have.
  auto only_last = optim::adaptation_param_groups(
      *model, LarsOptions(),
      [](const std::string& name, const torch::Tensor&) { return name.rfind("4.", 0) != 0; });
  EXPECT_EQ(only_last[0].params().size(), 2u);
  torch::OrderedDict<std::string, torch::Tensor> stranger;
  stranger.insert("nope.weight", torch::zeros({2, 2}));
  try {
    optim::adaptation_param_groups(stranger, *model, LarsOptions());
    ADD_FAILURE() << "no error for a name the module does not have";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'nope.weight' is not a parameter"), std::string::npos)
        << e.what();
  }
}

TEST(Lars, RefusesBadOptionsByName) {
  expect_refused<Lars>(LarsOptions(-0.1), "Lars: lr must be >= 0, got -0.1 (param group 0)");
  expect_refused<Lars>(LarsOptions().trust_coefficient(0), "trust_coefficient (eta) must be > 0");
  expect_refused<Lars>(LarsOptions().trust_coefficient(-1), "trust_coefficient (eta) must be > 0");
  expect_refused<Lars>(LarsOptions().momentum(-0.5), "momentum must be >= 0");
  expect_refused<Lars>(LarsOptions().weight_decay(-1e-4), "weight_decay must be >= 0");
  expect_refused<Lars>(LarsOptions().eps(-1), "eps must be >= 0");
  expect_refused<Lars>(LarsOptions().momentum(0).nesterov(true), "nesterov needs momentum > 0");
  // Changed after construction (e.g. by a schedule): step refuses it.
  auto model = trust_ratio_model();
  Lars optimizer(param_groups(*model, three_groups()));
  static_cast<LarsOptions&>(optimizer.param_groups()[1].options()).lr(-1);
  EXPECT_THROW(train(model, 0, 1, [&] { optimizer.step(); }), InvalidArgument);
}

// torch::save / torch::load of the optimizer: a restored optimizer continues as the original.
TEST(Lars, SavedAndLoadedStateContinuesIdentically) {
  expect_saved_state_continues<Lars>(three_groups());
}

// cohort's one-process checkpoint restores the state and the param groups' options (a
// scheduled learning rate), which torch's load alone leaves as constructed in libtorch 1.13.
TEST(Lars, CheckpointRestoresStateAndScheduledLearningRate) {
  TempDir dir;
  auto model = trust_ratio_model();
  Lars optimizer(param_groups(*model, three_groups()));
  train(model, 0, 3, [&] { optimizer.step(); });
  optimizer.param_groups()[0].options().set_lr(0.125);
  TrainingState state;
  state.module = model.get();
  state.optimizer = &optimizer;
  state.rng = false;
  save_checkpoint(dir.file("lars.ckpt"), state);

  auto restored = trust_ratio_model();
  Lars loaded(param_groups(*restored, three_groups()));
  TrainingState into;
  into.module = restored.get();
  into.optimizer = &loaded;
  into.rng = false;
  LoadOptions any_job;
  any_job.any_job = true;
  ASSERT_TRUE(load_checkpoint(dir.file("lars.ckpt"), into, any_job));
  EXPECT_EQ(loaded.param_groups()[0].options().get_lr(), 0.125);
  train(model, 3, 6, [&] { optimizer.step(); });
  train(restored, 3, 6, [&] { loaded.step(); });
  const auto got = parameters_of(*restored), want = parameters_of(*model);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

// The multi-rank parity and checkpoint cases are in trust_ratio_parity_test.cc.

}  // namespace lars_test
}  // namespace cohort::testing
