// Planning a run (cohort/torch/plan/run_plan.h): what a request leaves to the planner is
// checked before the probe is timed, every rank gets rank 0's choice, and the choice lands in
// the strategy options. The examples' planner runs end to end in tests/launch.
#include "cohort/torch/plan/run_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort {
namespace {

torch::nn::Sequential small_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 4));
}

// A request whose probe is a copy of small_model() at one batch.
RunPlanRequest request_with_probe() {
  RunPlanRequest request;
  auto probe = small_model();
  const auto inputs = torch::randn({8, 16});
  const auto targets = torch::randn({8, 4});
  request.probe = probe.ptr();
  request.probe_loss = [probe, inputs, targets]() mutable {
    return torch::mse_loss(probe->forward(inputs), targets);
  };
  request.probe_optimizer = [](const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
    return std::make_unique<torch::optim::SGD>(tensors.values(), 0.1);
  };
  return request;
}

// plan_run throws InvalidArgument saying `says` (before anything collective).
void expect_refused(const RunPlanRequest& request, const std::string& says) {
  auto groups = testing::make_inproc_groups(1, testing::quick_options());
  auto model = small_model();
  try {
    plan_run(*groups[0], *model, request);
    ADD_FAILURE() << "planned what cannot run: " << says;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(RunPlan, LocalSgdOrPowerSgdAllowedWhereItCannotRunIsRefused) {
  for (const bool local_sgd : {true, false}) {
    const std::string flag = local_sgd ? "--allow-local-sgd" : "--allow-powersgd";
    const std::string what = local_sgd ? "local SGD" : "PowerSGD";
    RunPlanRequest zero = request_with_probe();
    zero.strategy = StrategyKind::kZero1;
    zero.allow_local_sgd = local_sgd;
    zero.allow_powersgd = !local_sgd;
    expect_refused(zero, flag + ": " + what + " runs under ddp; --strategy is zero1");
    RunPlanRequest hooked = request_with_probe();
    hooked.options.comm_hook = allreduce_hook();
    hooked.allow_local_sgd = local_sgd;
    hooked.allow_powersgd = !local_sgd;
    expect_refused(hooked,
                   flag + ": not with --local-sgd, --comm-hook, --diloco or --master-weights");
  }
}

TEST(RunPlan, StrategiesOutsideAutoOrAllRuledOutAreRefused) {
  RunPlanRequest named = request_with_probe();
  named.strategy = StrategyKind::kDdp;
  named.strategies = {StrategyKind::kZero1};
  expect_refused(named, "--plan-strategies: only with --strategy auto");
  RunPlanRequest ruled_out = request_with_probe();
  ruled_out.strategies = {StrategyKind::kZero1};
  ruled_out.options.comm_hook = allreduce_hook();  // ddp only
  expect_refused(ruled_out,
                 "none of the strategies asked for runs with the other options given; "
                 "these do: ddp");
}

// Two ranks plan together (the probe timed on each, the figures agreed) and both end with one
// choice, among the strategies asked for; the options take its buckets.
TEST(RunPlan, TwoRanksPlanTogetherAndChooseAmongTheStrategiesAskedFor) {
  constexpr int kWorld = 2;
  auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
  std::vector<RunPlanRequest> requests;
  std::vector<torch::nn::Sequential> models;
  for (int rank = 0; rank < kWorld; ++rank) {
    requests.push_back(request_with_probe());
    requests.back().strategies = {StrategyKind::kDdp, StrategyKind::kZero2};
    requests.back().automatic_buckets = true;
    models.push_back(small_model());
  }
  std::vector<RunPlan> plans(kWorld);
  testing::run_ranks(kWorld, [&](int rank) {
    plans[rank] = plan_run(*groups[rank], *models[rank], requests[rank]);
  });
  EXPECT_EQ(plans[0].prediction.config.describe(), plans[1].prediction.config.describe());
  EXPECT_TRUE(plans[0].strategy == StrategyKind::kDdp || plans[0].strategy == StrategyKind::kZero2)
      << strategy_name(plans[0].strategy);
  const StrategyOptions applied = plans[0].applied({});
  EXPECT_EQ(applied.bucket_cap_mb, plans[0].bucket_cap_mb);
  EXPECT_EQ(applied.first_bucket_cap_mb, plans[0].first_bucket_cap_mb);
}

TEST(RunPlan, AppliedPutsTheChoiceIntoTheOptions) {
  RunPlan plan;
  plan.bucket_cap_mb = 4;
  plan.local_sgd_period = 8;
  plan.powersgd_rank = 0;
  plan.fsdp_min_unit_parameters = 1000;
  plan.fsdp_prefetch = false;
  StrategyOptions given;
  given.local_sgd = LocalSgdOptions{};
  given.local_sgd->warmup_steps = 5;
  const StrategyOptions applied = plan.applied(given);
  EXPECT_EQ(applied.bucket_cap_mb, 4);
  ASSERT_TRUE(applied.local_sgd.has_value());
  EXPECT_EQ(applied.local_sgd->period, 8);
  EXPECT_EQ(applied.local_sgd->warmup_steps, 5);  // the run's own warm-up is kept
  EXPECT_EQ(applied.fsdp_min_unit_parameters, 1000);
  EXPECT_FALSE(applied.fsdp_prefetch);
  plan.local_sgd_period = 0;
  plan.powersgd_rank = 2;
  const StrategyOptions powersgd = plan.applied(given);
  EXPECT_FALSE(powersgd.local_sgd.has_value());
  ASSERT_TRUE(powersgd.comm_hook != nullptr);
  EXPECT_NE(powersgd.comm_hook->name().find("powersgd"), std::string::npos)
      << powersgd.comm_hook->name();
}

}  // namespace
}  // namespace cohort
