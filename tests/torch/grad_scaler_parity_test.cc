// GradScaler in data-parallel training: an overflow on one rank only (in its input under DDP,
// where the allreduce spreads it; in one rank's gradient shard under ZeRO and FSDP, where
// nothing else would) makes every rank skip the same step and back off the same way, and the
// ranks end with the parameters of one process that trained the whole batch with a scaler and
// skipped that step (rtol 1e-5: the ranks' averaged gradients and the whole batch's differ
// only by float32 summation order).
#include <gtest/gtest.h>

#include <limits>
#include <mutex>
#include <optional>
#include <vector>

#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace grad_scaler_parity_test {

constexpr int kSteps = 10;
constexpr int kOverflowStep = 4;
constexpr int kRowsPerRank = 3;
constexpr float kInf = std::numeric_limits<float>::infinity();

amp::GradScalerOptions scaler_options() {
  amp::GradScalerOptions options;
  options.init_scale = 1024;
  options.growth_interval = 3;  // grows twice in 10 steps, backs off once
  return options;
}

torch::Tensor inputs(int step, int rows) {
  return torch::sin(torch::arange(rows * 10, torch::kFloat32).view({rows, 10}) * 0.37 * (step + 1));
}
torch::Tensor targets(int step, int rows) {
  return torch::cos(torch::arange(rows * 4, torch::kFloat32).view({rows, 4}) * 0.11 * (step + 1));
}

torch::nn::Sequential model() {
  return layers({10, 16, 16, 4});
}

std::vector<torch::Tensor> clones(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters()) out.push_back(p.detach().clone());
  return out;
}

struct Run {
  std::vector<torch::Tensor> parameters;
  std::vector<bool> stepped;
  std::vector<double> scales;
};

// One process on the whole batch: the overflow is an inf in the gradient at kOverflowStep.
Run reference(const std::vector<torch::Tensor>& initial, int world, double clip) {
  auto net = model();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < initial.size(); ++i) net->parameters()[i].copy_(initial[i]);
  }
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  amp::GradScaler scaler(scaler_options());
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const int rows = world * kRowsPerRank;
    auto loss = torch::mse_loss(net->forward(inputs(step, rows)), targets(step, rows));
    scaler.scale(loss).backward();
    if (step == kOverflowStep) net->parameters()[0].grad()[0][0] = kInf;
    if (clip > 0) {
      scaler.unscale_(optimizer);
      torch::nn::utils::clip_grad_norm_(net->parameters(), clip);
    }
    run.stepped.push_back(scaler.step(optimizer));
    scaler.update();
    run.scales.push_back(scaler.get_scale());
  }
  run.parameters = clones(*net);
  return run;
}

struct Case {
  StrategyKind strategy;
  double clip = 0;
  int world = 2;
  // An FSDP kind's ShardingStrategy instead of fsdp_sharding_of(strategy): FSDP's NO_SHARD (DDP
  // underneath) is no StrategyKind, so it runs as kFullShard with this set to kNoShard.
  std::optional<ShardingStrategy> fsdp_sharding = std::nullopt;
};

// The ShardingStrategy of an FSDP case.
ShardingStrategy sharding_of(const Case& c) {
  return c.fsdp_sharding.value_or(fsdp_sharding_of(c.strategy));
}

// Where the overflow comes from: under DDP, NO_SHARD and HYBRID_SHARD the last rank's input
// (the reductions spread it: DDP's average to every rank, HYBRID's replica average to the other
// node); under ZeRO, FULL_SHARD and SHARD_GRAD_OP the last rank's own gradient shard after
// backward, which only a reduction of the finding can tell the other ranks about.
bool overflow_in_input(const Case& c) {
  if (is_fsdp(c.strategy)) {
    const ShardingStrategy sharding = sharding_of(c);
    return sharding == ShardingStrategy::kNoShard || sharding == ShardingStrategy::kHybridShard;
  }
  return c.strategy == StrategyKind::kDdp;
}

// This rank's slice of the step's batch.
torch::Tensor rank_inputs(const Case& c, int rank, int step) {
  auto x =
      inputs(step, c.world * kRowsPerRank).narrow(0, rank * kRowsPerRank, kRowsPerRank).clone();
  if (overflow_in_input(c) && step == kOverflowStep && rank == c.world - 1) x[0][0] = kInf;
  return x;
}

// Sharded: the last rank puts an inf in its first non-empty gradient shard, which no other
// rank holds.
void inject_into_shard(const std::vector<torch::Tensor>& shards) {
  for (const auto& shard : shards) {
    if (shard.numel() > 0 && shard.grad().defined()) {
      shard.grad()[0] = kInf;
      return;
    }
  }
  FAIL() << "the last rank holds no gradient shard";
}

Run train_rank(const Case& c, int rank, std::shared_ptr<Group> group,
               std::vector<torch::Tensor>* initial) {
  auto net = model();
  if (rank == 0) *initial = clones(*net);  // what every wrapper broadcasts
  std::optional<DistributedDataParallel> ddp;
  std::optional<ZeroDataParallel> zero;
  std::optional<FullyShardedDataParallel> fsdp;
  std::vector<torch::Tensor> trained;
  if (c.strategy == StrategyKind::kDdp) {
    ddp.emplace(net, group);
  } else if (is_zero(c.strategy)) {
    ZeroOptions options;
    options.stage = c.strategy == StrategyKind::kZero1 ? 1 : 2;
    zero.emplace(net, group, options);
  } else {
    FsdpOptions options;
    options.strategy = sharding_of(c);
    fsdp.emplace(net, group, options);
  }
  const auto parameters = zero ? zero->parameters() : fsdp ? fsdp->parameters() : net->parameters();
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(0.05).momentum(0.9));
  amp::GradScaler scaler(scaler_options());
  Run run;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    auto y = targets(step, c.world * kRowsPerRank).narrow(0, rank * kRowsPerRank, kRowsPerRank);
    auto loss = torch::mse_loss(net->forward(rank_inputs(c, rank, step)), y);
    scaler.scale(loss).backward();
    if (!overflow_in_input(c) && step == kOverflowStep && rank == c.world - 1) {
      inject_into_shard(parameters);
    }
    bool stepped = false;
    if (ddp) {
      if (c.clip > 0) {
        scaler.unscale_(optimizer);
        torch::nn::utils::clip_grad_norm_(net->parameters(), c.clip);
      }
      stepped = scaler.step(optimizer);
    } else if (zero) {
      if (c.clip > 0) scaler.clip_grad_norm(*zero, optimizer, c.clip);
      stepped = scaler.step(*zero, optimizer);
    } else {
      if (c.clip > 0) scaler.clip_grad_norm(*fsdp, optimizer, c.clip);
      stepped = scaler.step(*fsdp, optimizer);
    }
    run.stepped.push_back(stepped);
    scaler.update();
    run.scales.push_back(scaler.get_scale());
  }
  if (fsdp) {
    auto full = fsdp->full_parameters();
    run.parameters = clones(*net);
  } else {
    run.parameters = clones(*net);
  }
  return run;
}

void expect_every_rank_skips_with_the_reference(const Case& c) {
  std::vector<Run> runs(c.world);
  std::vector<torch::Tensor> initial;
  auto body = [&](int rank, std::shared_ptr<Group> group) {
    runs[rank] = train_rank(c, rank, std::move(group), &initial);
  };
  if (c.strategy == StrategyKind::kHybridShard) {
    run_with_groups_on_nodes({"a", "a", "b", "b"}, body);
  } else {
    run_with_groups(c.world, body);
  }
  const Run want = reference(initial, c.world, c.clip);
  ASSERT_FALSE(want.stepped[kOverflowStep]);
  for (int rank = 0; rank < c.world; ++rank) {
    EXPECT_EQ(runs[rank].stepped, want.stepped) << "rank " << rank;
    EXPECT_EQ(runs[rank].scales, want.scales) << "rank " << rank;
    ASSERT_EQ(runs[rank].parameters.size(), want.parameters.size());
    for (size_t i = 0; i < want.parameters.size(); ++i) {
      EXPECT_TRUE(torch::allclose(runs[rank].parameters[i], want.parameters[i], 1e-5, 1e-6))
          << "rank " << rank << " parameter " << i << ": max difference "
          << (runs[rank].parameters[i] - want.parameters[i]).abs().max().item<float>();
    }
  }
}

TEST(GradScalerParity, DdpOverflowOnOneRankIsSeenByEveryRank) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kDdp});
}
TEST(GradScalerParity, DdpWithUnscaleAndClipping) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kDdp, 0.5});
}
TEST(GradScalerParity, Zero1OverflowInOneShard) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kZero1});
}
TEST(GradScalerParity, Zero2OverflowInOneShardWithClipping) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kZero2, 0.5});
}
TEST(GradScalerParity, Zero2AtThreeRanks) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kZero2, 0, 3});
}
TEST(GradScalerParity, FullShardOverflowInOneShard) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kFullShard});
}
TEST(GradScalerParity, FullShardWithClipping) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kFullShard, 0.5});
}
TEST(GradScalerParity, ShardGradOpOverflowInOneShard) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kShardGradOp});
}
TEST(GradScalerParity, NoShardOverflowOnOneRank) {
  expect_every_rank_skips_with_the_reference(
      {StrategyKind::kFullShard, 0.5, 2, ShardingStrategy::kNoShard});
}
TEST(GradScalerParity, HybridShardOverflowInOneShardOfOneReplica) {
  expect_every_rank_skips_with_the_reference({StrategyKind::kHybridShard, 0.5, 4});
}

}  // namespace grad_scaler_parity_test
}  // namespace cohort::testing
