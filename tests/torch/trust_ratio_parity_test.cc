// LARS and LAMB under DDP, ZeRO and FSDP against one process training on the whole batch, and
// their checkpoints: one suite, run for each optimizer (lars_test.cc and lamb_test.cc hold
// what is particular to each).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "checkpoint_files.h"
#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"
#include "ddp_harness.h"
#include "trust_ratio_harness.h"

namespace cohort::testing {
namespace {

using optim::Lamb;
using optim::LambOptions;
using optim::Lars;
using optim::LarsOptions;

MakeOptimizer make_lars(double eps) {
  return [eps](const torch::OrderedDict<std::string, torch::Tensor>& named,
               const torch::nn::Module& module, optim::NormReduction reduction) {
    auto options =
        LarsOptions(0.5).momentum(0.9).weight_decay(1e-2).trust_coefficient(0.02).eps(eps);
    return std::make_unique<Lars>(optim::adaptation_param_groups(named, module, options),
                                  LarsOptions(), std::move(reduction));
  };
}

MakeOptimizer make_lamb() {
  return [](const torch::OrderedDict<std::string, torch::Tensor>& named,
            const torch::nn::Module& module, optim::NormReduction reduction) {
    auto options = LambOptions(0.02).weight_decay(1e-2).trust_clip(5.0);
    return std::make_unique<Lamb>(optim::adaptation_param_groups(named, module, options),
                                  LambOptions(), std::move(reduction));
  };
}

// One optimizer of the suite.
struct TrustRatioOptimizer {
  const char* name;
  MakeOptimizer make;
  // HYBRID_SHARD's case: the norms must be summed over one node's ranks, not over the
  // replicas. LARS runs it with a large eps, which makes a double count show (its ratio is
  // otherwise invariant to scaling both norms).
  MakeOptimizer make_for_hybrid;
  // Tolerance: the ranks average gradients of slices where one process has the whole batch's
  // in one sum; the trust ratios carry that rounding into every element. Adam's division by
  // small second moments (LAMB) magnifies the rounding of gradients near zero a little more.
  double rtol, atol;
};

void PrintTo(const TrustRatioOptimizer& optimizer, std::ostream* out) {
  *out << optimizer.name;
}

TrustRatioOptimizer lars() {
  return {"Lars", make_lars(1e-8), make_lars(0.05), 1e-4, 1e-6};
}
TrustRatioOptimizer lamb() {
  return {"Lamb", make_lamb(), make_lamb(), 2e-4, 1e-5};
}

TrainCase case_of(const MakeOptimizer& make, std::optional<StrategyKind> strategy, int world) {
  TrainCase c;
  c.strategy = strategy;
  c.world = world;
  c.make_optimizer = make;
  return c;
}

std::string optimizer_test_name(const ::testing::TestParamInfo<TrustRatioOptimizer>& info) {
  return info.param.name;
}

class TrustRatioParity : public ::testing::TestWithParam<TrustRatioOptimizer> {};

TEST_P(TrustRatioParity, DdpMatchesOneProcess) {
  const auto& o = GetParam();
  const auto expected = train_case(case_of(o.make, kOneProcess, 1));
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    expect_close(train_case(case_of(o.make, StrategyKind::kDdp, world)), expected, o.rtol, o.atol);
  }
}

TEST_P(TrustRatioParity, ShardedMatchOneProcessWithTheNormReduction) {
  const auto& o = GetParam();
  const auto expected = train_case(case_of(o.make, kOneProcess, 1));
  for (StrategyKind strategy :
       {StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kFullShard}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " at world " + std::to_string(world));
      expect_close(train_case(case_of(o.make, strategy, world)), expected, o.rtol, o.atol);
    }
  }
}

TEST_P(TrustRatioParity, ShardedRefuseToStepWithoutTheReduction) {
  for (StrategyKind strategy :
       {StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kFullShard}) {
    SCOPED_TRACE(strategy_name(strategy));
    expect_refused_without_reduction(case_of(GetParam().make, strategy, 2));
  }
}

// Two nodes of two ranks.
TEST_P(TrustRatioParity, HybridShardSumsOverOneReplica) {
  const auto& o = GetParam();
  auto c = case_of(o.make_for_hybrid, StrategyKind::kHybridShard, 4);
  c.node_of = {"a", "a", "b", "b"};
  expect_close(train_case(c), train_case(case_of(o.make_for_hybrid, kOneProcess, 1)), o.rtol,
               o.atol);
}

// cohort's checkpoints: DDP's file and ZeRO's / FSDP's sharded directory, saved after 3 steps
// and loaded into fresh ranks, continue as the run that did not stop.
TEST_P(TrustRatioParity, CheckpointsContinueIdentically) {
  for (StrategyKind strategy :
       {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kFullShard}) {
    SCOPED_TRACE(strategy_name(strategy));
    TempDir dir;
    auto whole = case_of(GetParam().make, strategy, 2);
    whole.steps = 6;
    const auto expected = train_case(whole);
    auto first = whole;
    first.steps = 3;
    first.save_to = strategy == StrategyKind::kDdp ? dir.file("ddp.ckpt") : dir.file("sharded");
    train_case(first);
    auto second = whole;
    second.first_step = 3;
    second.load_from = first.save_to;
    expect_close(train_case(second), expected, 0, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TrustRatioParity, ::testing::Values(lars(), lamb()),
                         optimizer_test_name);

}  // namespace
}  // namespace cohort::testing
