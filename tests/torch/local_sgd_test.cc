// Local SGD (local_sgd.h): periodic and hierarchical model averaging and post-local SGD, on
// thread ranks that each train a copy of one model on their own slice of every batch.
#include "cohort/torch/local_sgd/local_sgd.h"

#include <gtest/gtest.h>

#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"
#include "local_training.h"
#include "optim/trust_ratio.h"

namespace cohort::testing {
namespace local_sgd_test {

constexpr int kPerRank = 3;

// What a rank saw at each step.
struct RankLog {
  std::vector<std::vector<torch::Tensor>> pre;   // parameters after optimizer.step()
  std::vector<std::vector<torch::Tensor>> post;  // and after averaging
  std::vector<int> averaged;                     // what the averager returned (a scope for
                                                 // the hierarchical one)
  std::vector<std::vector<torch::Tensor>> momentum_pre, momentum_post;
};

// How a rank trains: what wraps its model (DDP) and what runs after each optimizer step.
struct RankSetup {
  std::shared_ptr<void> keep;
  std::function<int(torch::nn::Module&, torch::optim::Optimizer&)> after_step;
};
using MakeSetup =
    std::function<RankSetup(int rank, std::shared_ptr<Group> group, torch::nn::Sequential& model)>;

std::vector<torch::Tensor> momenta(torch::optim::SGD& sgd, torch::nn::Sequential& model) {
  std::vector<torch::Tensor> buffers;
  for (const auto& p : model->parameters()) {
    auto& state = sgd.state().at(optim::detail::state_key(sgd, p));
    buffers.push_back(static_cast<torch::optim::SGDParamState&>(*state).momentum_buffer().clone());
  }
  return buffers;
}

// Every rank starts from one model (made here, on the main thread) and trains it with SGD and
// momentum on its slice of each step's batch.
std::vector<RankLog> train_ranks(int world, int steps, const MakeSetup& make,
                                 const std::vector<std::string>& node_of = {}) {
  torch::set_num_threads(1);
  const auto data = make_step_data(steps, world * kPerRank);
  torch::manual_seed(99);
  auto initial = small_mlp();
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < world; ++r) models.push_back(copy_of(initial));
  std::vector<RankLog> logs(world);
  auto body = [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[rank];
    auto& log = logs[rank];
    torch::optim::SGD sgd(model->parameters(), sgd_momentum());
    auto setup = make(rank, group, model);
    for (int s = 0; s < steps; ++s) {
      sgd.zero_grad();
      loss_of(model, data.inputs_of(s, rank, kPerRank), data.targets_of(s, rank, kPerRank))
          .backward();
      sgd.step();
      log.pre.push_back(snapshot(model->parameters()));
      log.momentum_pre.push_back(momenta(sgd, model));
      log.averaged.push_back(setup.after_step ? setup.after_step(*model, sgd) : 0);
      log.post.push_back(snapshot(model->parameters()));
      log.momentum_post.push_back(momenta(sgd, model));
    }
  };
  if (node_of.empty()) {
    run_with_groups(world, body);
  } else {
    run_with_groups_on_nodes(node_of, body);
  }
  return logs;
}

// One process on the whole batch of every step.
std::vector<std::vector<torch::Tensor>> train_reference(int world, int steps) {
  const auto data = make_step_data(steps, world * kPerRank);
  torch::manual_seed(99);
  auto model = small_mlp();
  torch::optim::SGD sgd(model->parameters(), sgd_momentum());
  std::vector<std::vector<torch::Tensor>> states;
  for (int s = 0; s < steps; ++s) {
    sgd.zero_grad();
    loss_of(model, data.inputs[s], data.targets[s]).backward();
    sgd.step();
    states.push_back(snapshot(model->parameters()));
  }
  return states;
}

MakeSetup periodic(LocalSgdOptions options) {
  return [options](int, std::shared_ptr<Group> group, torch::nn::Sequential&) {
    auto averager = std::make_shared<PeriodicModelAverager>(group, options);
    return RankSetup{averager, [averager](torch::nn::Module& m, torch::optim::Optimizer& o) {
                       return averager->average(m, &o) ? 1 : 0;
                     }};
  };
}

bool ranks_identical(const std::vector<RankLog>& logs, int step, bool post = true) {
  for (size_t r = 1; r < logs.size(); ++r) {
    const auto& a = post ? logs[0].post[step] : logs[0].pre[step];
    const auto& b = post ? logs[r].post[step] : logs[r].pre[step];
    if (!bitwise_equal(a, b)) return false;
  }
  return true;
}

// With H = 1 and plain SGD + momentum, averaging the models after every step is averaging the
// gradients: the mean of the ranks' momentum buffers follows the whole batch's momentum (the
// update is linear in the gradient). Tolerance: float32 rounding of the two summation orders
// over 20 steps, |diff| <= 1e-6 + 1e-4 |reference|.
TEST(LocalSgd, PeriodOneEqualsOneProcessOnTheWholeBatch) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    constexpr int kSteps = 20;
    LocalSgdOptions options;
    options.period = 1;
    const auto logs = train_ranks(world, kSteps, periodic(options));
    const auto reference = train_reference(world, kSteps);
    for (int s = 0; s < kSteps; ++s) {
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(logs[r].averaged[s], 1) << "step " << s;
        EXPECT_EQ(compare(logs[r].post[s], reference[s], 1e-4, 1e-6), "")
            << "rank " << r << " step " << s;
      }
    }
  }
}

// H = 1 matches DDP too (DDP averages gradients; here the models are averaged).
TEST(LocalSgd, PeriodOneEqualsDdp) {
  constexpr int kWorld = 2, kSteps = 12;
  LocalSgdOptions options;
  options.period = 1;
  const auto local = train_ranks(kWorld, kSteps, periodic(options));
  const auto ddp = train_ranks(kWorld, kSteps, [](int, auto group, torch::nn::Sequential& model) {
    return RankSetup{std::make_shared<DistributedDataParallel>(model, group), nullptr};
  });
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_EQ(compare(local[0].post[s], ddp[0].post[s], 1e-4, 1e-6), "") << "step " << s;
  }
}

// H = 4: after an averaging step every rank holds the same bits, the mean of what the ranks
// had before it (|diff| <= 1e-7 + 1e-6 |mean|: the allreduce's sum-then-divide against
// torch's mean); between averages the ranks drift apart.
TEST(LocalSgd, PeriodFourAveragesEveryFourthStepToTheMean) {
  constexpr int kWorld = 3, kSteps = 13;
  LocalSgdOptions options;
  options.period = 4;
  const auto logs = train_ranks(kWorld, kSteps, periodic(options));
  for (int s = 0; s < kSteps; ++s) {
    const bool due = s % 4 == 0;
    SCOPED_TRACE("step " + std::to_string(s));
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(logs[r].averaged[s], due ? 1 : 0);
    if (due) {
      EXPECT_TRUE(ranks_identical(logs, s));
      std::vector<std::vector<torch::Tensor>> pre;
      for (const auto& log : logs) pre.push_back(log.pre[s]);
      EXPECT_EQ(compare(logs[0].post[s], mean_over(pre), 1e-6, 1e-7), "");
    } else {
      EXPECT_FALSE(ranks_identical(logs, s));
      for (int r = 0; r < kWorld; ++r) EXPECT_TRUE(bitwise_equal(logs[r].pre[s], logs[r].post[s]));
    }
  }
}

TEST(LocalSgd, WarmupDelaysTheFirstAverage) {
  constexpr int kWorld = 2, kSteps = 9;
  LocalSgdOptions options;
  options.period = 3;
  options.warmup_steps = 5;
  const auto logs = train_ranks(kWorld, kSteps, periodic(options));
  const std::vector<int> expected = {0, 0, 0, 0, 0, 1, 0, 0, 1};
  EXPECT_EQ(logs[0].averaged, expected);
  EXPECT_FALSE(ranks_identical(logs, 4));
  EXPECT_TRUE(ranks_identical(logs, 5));
}

// 2 nodes x 2 ranks (TCP threads with node ids): node-mates hold the same bits after every
// step, everyone every H = 3 steps; the two nodes differ in between.
TEST(LocalSgd, HierarchicalAveragesInsideNodesEveryStepAndGloballyEveryH) {
  constexpr int kSteps = 7;
  const std::vector<std::string> node_of = {"a", "a", "b", "b"};
  HierarchicalLocalSgdOptions options;
  options.period = 3;
  const auto logs = train_ranks(
      4, kSteps,
      [options](int, std::shared_ptr<Group> group, torch::nn::Sequential&) {
        auto averager = std::make_shared<HierarchicalModelAverager>(group, options);
        EXPECT_EQ(averager->node_group().size(), 2);
        return RankSetup{averager, [averager](torch::nn::Module& m, torch::optim::Optimizer& o) {
                           return static_cast<int>(averager->average(m, &o));
                         }};
      },
      node_of);
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const bool global = s % 3 == 0;
    EXPECT_EQ(logs[0].averaged[s],
              static_cast<int>(global ? AveragingScope::kGlobal : AveragingScope::kNode));
    EXPECT_TRUE(bitwise_equal(logs[0].post[s], logs[1].post[s]));
    EXPECT_TRUE(bitwise_equal(logs[2].post[s], logs[3].post[s]));
    EXPECT_EQ(bitwise_equal(logs[0].post[s], logs[2].post[s]), global);
    std::vector<std::vector<torch::Tensor>> pre;
    for (int r = global ? 0 : 2; r < 4; ++r) pre.push_back(logs[r].pre[s]);
    EXPECT_EQ(compare(logs[2].post[s], mean_over(pre), 1e-6, 1e-7), "");
  }
}

// Post-local SGD: DDP with post_local_sgd_hook(K) and an averager warming up for K steps.
// The first K steps are DDP's, to the bit; then each rank steps on its own gradient, the models
// are averaged at K, K + H, ..., and differ in between.
TEST(LocalSgd, PostLocalMatchesDdpForKStepsThenDivergesUntilAveraged) {
  constexpr int kWorld = 2, kSteps = 10, kStart = 4, kPeriod = 3;
  const auto ddp = train_ranks(kWorld, kSteps, [](int, auto group, torch::nn::Sequential& model) {
    return RankSetup{std::make_shared<DistributedDataParallel>(model, group), nullptr};
  });
  const auto post_local =
      train_ranks(kWorld, kSteps, [](int, auto group, torch::nn::Sequential& model) {
        DdpOptions ddp_options;
        ddp_options.comm_hook = post_local_sgd_hook(kStart);
        auto wrapped = std::make_shared<DistributedDataParallel>(model, group, ddp_options);
        LocalSgdOptions options;
        options.period = kPeriod;
        options.warmup_steps = kStart;
        auto averager = std::make_shared<PeriodicModelAverager>(group, options);
        auto keep =
            std::make_shared<std::pair<std::shared_ptr<DistributedDataParallel>,
                                       std::shared_ptr<PeriodicModelAverager>>>(wrapped, averager);
        return RankSetup{keep, [averager](torch::nn::Module& m, torch::optim::Optimizer& o) {
                           return averager->average(m, &o) ? 1 : 0;
                         }};
      });
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    if (s < kStart) {
      for (int r = 0; r < kWorld; ++r) {
        EXPECT_TRUE(bitwise_equal(post_local[r].post[s], ddp[r].post[s]));
        EXPECT_EQ(post_local[r].averaged[s], 0);
      }
      continue;
    }
    const bool averaged = (s - kStart) % kPeriod == 0;
    EXPECT_EQ(post_local[0].averaged[s], averaged ? 1 : 0);
    EXPECT_FALSE(ranks_identical(post_local, s, /*post=*/false));  // own gradients
    EXPECT_EQ(ranks_identical(post_local, s), averaged);
  }
}

// With a local group, the local phase averages gradients over it: here the local group is the
// whole world, so post-local SGD stays DDP to the bit.
TEST(LocalSgd, PostLocalHookWithALocalGroupAveragesOverIt) {
  constexpr int kWorld = 2, kSteps = 6;
  const auto ddp = train_ranks(kWorld, kSteps, [](int, auto group, torch::nn::Sequential& model) {
    return RankSetup{std::make_shared<DistributedDataParallel>(model, group), nullptr};
  });
  const auto post_local =
      train_ranks(kWorld, kSteps, [](int rank, auto group, torch::nn::Sequential& model) {
        DdpOptions ddp_options;
        ddp_options.comm_hook = post_local_sgd_hook(2, group->split(0, rank));
        return RankSetup{std::make_shared<DistributedDataParallel>(model, group, ddp_options),
                         nullptr};
      });
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_TRUE(bitwise_equal(post_local[0].post[s], ddp[0].post[s])) << "step " << s;
  }
}

// average_optimizer_state: the momentum buffers become the ranks' mean in averaging steps (and
// only then). Tolerance as for the parameters.
TEST(LocalSgd, AveragesMomentumBuffersWhenAsked) {
  constexpr int kWorld = 3, kSteps = 5;
  LocalSgdOptions options;
  options.period = 2;
  options.average_optimizer_state = true;
  const auto logs = train_ranks(kWorld, kSteps, periodic(options));
  for (int s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    std::vector<std::vector<torch::Tensor>> pre;
    for (const auto& log : logs) pre.push_back(log.momentum_pre[s]);
    const auto mean = mean_over(pre);
    for (int r = 0; r < kWorld; ++r) {
      if (s % 2 == 0) {
        EXPECT_EQ(compare(logs[r].momentum_post[s], mean, 1e-6, 1e-7), "") << "rank " << r;
        EXPECT_TRUE(bitwise_equal(logs[r].momentum_post[s], logs[0].momentum_post[s]));
      } else {
        EXPECT_TRUE(bitwise_equal(logs[r].momentum_post[s], logs[r].momentum_pre[s]));
      }
    }
    if (s % 2 == 1) {
      EXPECT_FALSE(bitwise_equal(logs[0].momentum_post[s], logs[1].momentum_post[s]));
    }
  }
}

// Without the option the momentum buffers stay each rank's own.
TEST(LocalSgd, LeavesOptimizerStateAloneByDefault) {
  LocalSgdOptions options;
  options.period = 1;
  const auto logs = train_ranks(2, 2, periodic(options));
  EXPECT_FALSE(bitwise_equal(logs[0].momentum_post[1], logs[1].momentum_post[1]));
}

// Adam's state: exp_avg and exp_avg_sq are averaged, the integer step count is named as left
// alone.
TEST(LocalSgd, AveragesAdamMomentsAndNamesTheStepCountAsNotAveraged) {
  torch::manual_seed(5);
  auto initial = small_mlp();
  const auto data = make_step_data(1, 2 * kPerRank);
  std::vector<torch::nn::Sequential> models = {copy_of(initial), copy_of(initial)};
  std::vector<std::vector<std::string>> unaveraged(2);
  std::vector<std::vector<torch::Tensor>> moments(2);
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[rank];
    torch::optim::Adam adam(model->parameters(), torch::optim::AdamOptions(0.01));
    loss_of(model, data.inputs_of(0, rank, kPerRank), data.targets_of(0, rank, kPerRank))
        .backward();
    adam.step();
    LocalSgdOptions options;
    options.period = 1;
    options.average_optimizer_state = true;
    PeriodicModelAverager averager(group, options);
    EXPECT_TRUE(averager.average(*model, &adam));
    unaveraged[rank] = averager.unaveraged_state();
    for (const auto& p : model->parameters()) {
      auto& state = static_cast<torch::optim::AdamParamState&>(
          *adam.state().at(optim::detail::state_key(adam, p)));
      moments[rank].push_back(state.exp_avg().clone());
      moments[rank].push_back(state.exp_avg_sq().clone());
    }
  });
  EXPECT_TRUE(bitwise_equal(moments[0], moments[1]));
  ASSERT_EQ(unaveraged[0].size(), 4u);  // one per parameter
  for (const auto& entry : unaveraged[0]) {
    EXPECT_NE(entry.find(": step ("), std::string::npos) << entry;
  }
}

TEST(LocalSgd, RefusesBadPeriodsAndWarmup) {
  run_with_groups(1, [](int, std::shared_ptr<Group> group) {
    LocalSgdOptions zero;
    zero.period = 0;
    try {
      PeriodicModelAverager averager(group, zero);
      ADD_FAILURE() << "period 0 was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("period must be >= 1"), std::string::npos) << e.what();
    }
    LocalSgdOptions negative;
    negative.warmup_steps = -1;
    EXPECT_THROW(PeriodicModelAverager(group, negative), InvalidArgument);
    HierarchicalLocalSgdOptions local_zero;
    local_zero.local_period = 0;
    EXPECT_THROW(HierarchicalModelAverager(group, local_zero), InvalidArgument);
    HierarchicalLocalSgdOptions global_zero;
    global_zero.period = 0;
    EXPECT_THROW(HierarchicalModelAverager(group, global_zero), InvalidArgument);
    EXPECT_THROW(post_local_sgd_hook(-1), InvalidArgument);
  });
}

TEST(LocalSgd, MismatchedParameterShapesAreNamedOnEveryRank) {
  torch::manual_seed(3);
  std::vector<std::vector<torch::Tensor>> parameters = {
      {torch::randn({16, 10}), torch::randn({16})}, {torch::randn({17, 10}), torch::randn({16})}};
  const auto errors = errors_of(2, [&](int rank, std::shared_ptr<Group> group) {
    PeriodicModelAverager averager(group);
    averager.average(parameters[rank]);
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("PeriodicModelAverager: the ranks wrap different models"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("[17, 10]' on rank 1"), std::string::npos) << error;
  }
}

// average_now() averages outside the schedule (the example's end of an epoch) without counting
// a step: the schedule's next average comes at the call it would have anyway.
TEST(LocalSgd, AverageNowAveragesOffScheduleWithoutCountingAStep) {
  constexpr int kWorld = 2;
  LocalSgdOptions options;
  options.period = 4;
  options.warmup_steps = 1;
  const auto prototype = small_mlp();
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < kWorld; ++r) {
    models.push_back(copy_of(prototype));
    torch::NoGradGuard no_grad;
    for (auto& p : models.back()->parameters()) p.add_(r + 1);  // rank r: prototype + r + 1
  }
  std::vector<std::vector<torch::Tensor>> after(kWorld);
  std::vector<int64_t> steps(kWorld);
  std::vector<int> scheduled(kWorld);
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    PeriodicModelAverager averager(group, options);
    const bool before_warmup = averager.average(*models[rank]);  // call 0
    averager.average_now(*models[rank]);
    steps[rank] = averager.step();
    after[rank] = snapshot(models[rank]->parameters());
    scheduled[rank] = before_warmup ? -1 : averager.average(*models[rank]);  // call 1: due
  });
  const auto start = prototype->parameters();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(steps[r], 1) << "rank " << r;
    EXPECT_EQ(scheduled[r], 1) << "rank " << r;
    for (size_t i = 0; i < start.size(); ++i) {
      EXPECT_TRUE(torch::allclose(after[r][i], start[i] + 1.5, 1e-6, 1e-6))
          << "rank " << r << " parameter " << i;
    }
  }
}

}  // namespace local_sgd_test
}  // namespace cohort::testing
