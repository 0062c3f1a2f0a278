// ZeRO stages 1 and 2 (cohort/torch/shard/zero.h) against one process training on the whole batch:
// W ranks on disjoint slices, compared parameter by parameter after every step.
#include <gtest/gtest.h>

#include <memory>

#include "ddp_harness.h"

namespace cohort::testing {
namespace zero_parity_test {

// Tolerances: reduce-scatter sums in another order than one process's backward, and AdamW
// divides by the square root of small second moments, which magnifies that rounding.
ParityCase zero_case(StrategyKind strategy, int world, OptimizerKind optimizer) {
  ParityCase c;
  c.strategy = strategy;
  c.world = world;
  c.optimizer = optimizer;
  if (optimizer == OptimizerKind::kAdamW) {
    c.rtol = 1e-4;
    c.atol = 1e-5;
  }
  return c;
}

class ZeroParity : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(ZeroParity, EveryWorldSizeWithSgdMomentumAndAdamW) {
  for (OptimizerKind optimizer : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE("world " + std::to_string(world));
      auto c = zero_case(GetParam(), world, optimizer);
      // Small buckets: parameters cross block boundaries, buckets of 42 and 1056 elements
      // are not multiples of 3 or 4, and some ranks own nothing of a parameter.
      c.options.first_bucket_cap_mb = 0;
      c.options.bucket_cap_mb = 0.004;
      expect_parity(c);
    }
  }
}

TEST_P(ZeroParity, OneBucketForTheWholeModel) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kAdamW);
  c.options.first_bucket_cap_mb = 100;
  c.options.bucket_cap_mb = 100;
  expect_parity(c);
}

TEST_P(ZeroParity, ClippedGradientNorm) {
  for (int world : {1, 3}) {
    auto c = zero_case(GetParam(), world, OptimizerKind::kSgdMomentum);
    c.clip_norm = 0.5;  // below the gradients' norm in these steps: the clip does act
    expect_parity(c);
  }
}

TEST_P(ZeroParity, ConvWithBatchNorm) {
  auto c = zero_case(GetParam(), 2, OptimizerKind::kAdamW);
  c.make_model = conv_batchnorm();
  c.image_inputs = true;
  c.reference_per_slice = true;
  expect_parity(c);
}

TEST_P(ZeroParity, FrozenParameters) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kAdamW);
  c.frozen = {"fc1.weight", "fc2.bias"};
  expect_parity(c);
}

TEST_P(ZeroParity, UnusedBranchWithFindUnusedParameters) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kSgdMomentum);
  c.make_model = branchy([](int step, int rank) { return step % 3 != 0 && rank != 1; });
  c.reference_per_slice = true;
  c.options.find_unused_parameters = true;
  expect_parity(c);
}

TEST_P(ZeroParity, BranchNeverUsedWithStaticGraph) {
  auto c = zero_case(GetParam(), 2, OptimizerKind::kAdamW);
  c.make_model = branchy([](int, int) { return false; });
  c.options.static_graph = true;
  expect_parity(c);
}

TEST_P(ZeroParity, NoSyncAccumulation) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kAdamW);
  c.micro_batches = 3;
  expect_parity(c);
}

// Several synchronized backward calls before one step: the shards' .grad accumulate the
// averages, as .grad accumulates in one process.
TEST_P(ZeroParity, SynchronizedBackwardsAccumulate) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kAdamW);
  c.micro_batches = 3;
  c.sync_every_micro_batch = true;
  expect_parity(c);
}

TEST_P(ZeroParity, OverTcpAndSharedMemory) {
  auto c = zero_case(GetParam(), 3, OptimizerKind::kSgdMomentum);
  c.over_tcp = true;
  c.shared_memory = true;
  expect_parity(c);
}

INSTANTIATE_TEST_SUITE_P(Stages, ZeroParity,
                         ::testing::Values(StrategyKind::kZero1, StrategyKind::kZero2),
                         [](const auto& param_info) {
                           return std::string(strategy_name(param_info.param));
                         });

// Trains layers({10, 40, 40, 4}) at 2 ranks for 10 AdamW steps, the gradients set to none
// between steps (zero_grad(set_to_none=true), libtorch 2's default), with buckets that split
// parameters across blocks; returns rank 0's parameters. The initial weights and every rank's
// batches are made on this thread, so two calls see the same ones.
std::vector<torch::Tensor> train_two_ranks(StrategyKind strategy) {
  constexpr int kWorld = 2, kSteps = 10;
  torch::manual_seed(7);
  torch::nn::Sequential base = layers({10, 40, 40, 4});
  std::vector<torch::nn::Sequential> models;
  std::vector<std::vector<torch::Tensor>> batches(kWorld);
  for (int rank = 0; rank < kWorld; ++rank) {
    models.emplace_back(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(base->clone()));
    for (int step = 0; step < kSteps; ++step) batches[rank].push_back(torch::randn({3, 10}));
  }
  std::vector<torch::Tensor> result;
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    auto net = models[rank];
    DdpOptions ddp;
    ddp.first_bucket_cap_mb = 0;
    ddp.bucket_cap_mb = 0.004;
    std::unique_ptr<DistributedDataParallel> plain;
    std::unique_ptr<ZeroDataParallel> zero;
    std::vector<torch::Tensor> stepped;
    if (strategy == StrategyKind::kDdp) {
      plain = std::make_unique<DistributedDataParallel>(net, group, ddp);
      stepped = net->parameters();
    } else {
      ZeroOptions options;
      options.stage = strategy == StrategyKind::kZero1 ? 1 : 2;
      options.ddp = ddp;
      zero = std::make_unique<ZeroDataParallel>(net, group, options);
      stepped = zero->parameters();
    }
    torch::optim::AdamW optimizer(stepped, torch::optim::AdamWOptions(0.01).weight_decay(0.01));
    for (int step = 0; step < kSteps; ++step) {
      for (auto& t : stepped) t.mutable_grad() = torch::Tensor();
      net->forward(batches[rank][step]).pow(2).mean().backward();
      if (zero) {
        zero->step(optimizer);
      } else {
        optimizer.step();
      }
    }
    if (rank == 0) {
      for (const auto& p : net->parameters()) result.push_back(p.detach().clone());
    }
  });
  return result;
}

// At 2 ranks the average of two gradients is the same sum whatever the order, and the
// optimizer updates each element alone, so ZeRO must train bit for bit as DDP: every element
// that the in-place all-gather or the in-place reduce-scatter got wrong would show.
TEST_P(ZeroParity, TwoRanksTrainBitForBitAsDdp) {
  const auto expected = train_two_ranks(StrategyKind::kDdp);
  const auto actual = train_two_ranks(GetParam());
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(torch::equal(actual[i], expected[i]))
        << "parameter " << i << ": largest difference "
        << (actual[i] - expected[i]).abs().max().item<float>();
  }
}

TEST(DdpParity, FrozenParametersStartEqualAndStayUntouched) {
  auto c = ParityCase();
  c.world = 3;
  c.frozen = {"fc1.weight", "fc2.bias"};
  expect_parity(c);
}

}  // namespace zero_parity_test
}  // namespace cohort::testing
