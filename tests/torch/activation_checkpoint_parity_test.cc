// Activation checkpointing composed with DDP, ZeRO and FSDP.
//  - Parity: W ranks that checkpoint every block train 20 steps and match one process on the
//    whole batch without checkpointing (the harness of ddp_parity_test, |got - want| <= 1e-6 +
//    1e-5 |want|), under every strategy, find_unused_parameters, static_graph and no_sync.
//  - Same gradients, bit for bit (torch::equal): on each rank, a checkpointed copy and a plain
//    copy of a transformer with dropout (each rank's own generator: ranks are threads sharing
//    the default one) under the same wrapper give the same gradients and parameters for 3
//    steps: DDP at W = 2 and 3, ZeRO-2, FULL_SHARD; DDP with bf16 autocast and the GradScaler;
//    DDP with SyncBatchNorm (running statistics updated once).
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "checkpoint_models.h"
#include "cohort/torch/activation_checkpoint/checkpoint_modules.h"
#include "cohort/torch/amp/autocast.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace activation_checkpoint_parity_test {

// ---- parity with one process on the whole batch

ParityCase checkpoint_case(StrategyKind strategy, int world) {
  ParityCase c;
  c.world = world;
  c.strategy = strategy;
  c.make_model = [] { return std::make_shared<BlockStack>(0.0, /*checkpoint_in_forward=*/true); };
  c.fsdp.units = {"blocks.0", "blocks.1", "blocks.2"};
  return c;
}

class CheckpointParity : public ::testing::TestWithParam<StrategyKind> {};

TEST_P(CheckpointParity, EveryBlockCheckpointedAtTwoAndThreeRanks) {
  for (int world : {2, 3}) expect_parity(checkpoint_case(GetParam(), world));
}

TEST_P(CheckpointParity, NoSyncAccumulation) {
  auto c = checkpoint_case(GetParam(), 2);
  c.micro_batches = 2;
  expect_parity(c);
}

INSTANTIATE_TEST_SUITE_P(Strategies, CheckpointParity,
                         ::testing::Values(StrategyKind::kDdp, StrategyKind::kZero1,
                                           StrategyKind::kZero2, StrategyKind::kFullShard,
                                           StrategyKind::kShardGradOp),
                         [](const auto& param_info) {
                           return std::string(strategy_name(param_info.param));
                         });

TEST(CheckpointParityDdp, FindUnusedParametersAndStaticGraph) {
  auto unused = checkpoint_case(StrategyKind::kDdp, 2);
  unused.options.find_unused_parameters = true;
  expect_parity(unused);
  auto static_graph = checkpoint_case(StrategyKind::kDdp, 2);
  static_graph.options.static_graph = true;
  expect_parity(static_graph);
}

// FULL_SHARD gathers a checkpointed unit again for its recomputation, where it would gather it
// for its backward anyway: the bytes all-gathered per step are those of the plain model.
TEST(CheckpointParityFsdp, ACheckpointedUnitIsGatheredOncePerBackward) {
  auto gathered = [](bool checkpointed) {
    auto c = checkpoint_case(StrategyKind::kFullShard, 2);
    if (!checkpointed) c.make_model = [] { return std::make_shared<BlockStack>(0.0, false); };
    auto bytes = std::make_shared<std::vector<size_t>>();
    c.inspect_fsdp = [bytes](int rank, int, FullyShardedDataParallel& fsdp) {
      if (rank == 0) bytes->push_back(fsdp.last_iteration_stats().allgather_bytes);
    };
    expect_parity(c);
    return *bytes;
  };
  const auto plain = gathered(false), checkpointed = gathered(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  ASSERT_GT(plain.back(), 0u);
  EXPECT_EQ(checkpointed, plain);
}

// ---- the same gradients with and without checkpointing, under each wrapper

struct TrainingOptions {
  bool autocast_and_scaler = false;
};

// A model wrapped for data parallelism under `strategy`, with its optimizer.
class Wrapped {
 public:
  Wrapped(StrategyKind strategy, std::shared_ptr<torch::nn::Module> model,
          std::shared_ptr<Group> group, TrainingOptions options = {})
      : model_(model), options_(options) {
    if (strategy == StrategyKind::kDdp) {
      ddp_ = std::make_unique<DistributedDataParallel>(model, group);
    }
    if (is_zero(strategy)) {
      ZeroOptions zero;
      zero.stage = strategy == StrategyKind::kZero1 ? 1 : 2;
      zero_ = std::make_unique<ZeroDataParallel>(model, group, zero);
    }
    if (is_fsdp(strategy)) {
      FsdpOptions fsdp;
      fsdp.strategy = fsdp_sharding_of(strategy);
      fsdp.units = {"blocks.0", "blocks.1", "blocks.2"};
      fsdp_ = std::make_unique<FullyShardedDataParallel>(model, group, fsdp);
    }
    optimizer_ = std::make_unique<torch::optim::SGD>(trained(), torch::optim::SGDOptions(0.1));
  }

  // One step on `loss_of_model`'s loss; returns the gradients it stepped with.
  std::vector<torch::Tensor> step(const std::function<torch::Tensor()>& loss_of_model) {
    optimizer_->zero_grad();
    torch::Tensor loss;
    {
      amp::Autocast autocast(torch::kCPU, torch::kBFloat16, options_.autocast_and_scaler);
      loss = loss_of_model();
    }
    (options_.autocast_and_scaler ? scaler_.scale(loss) : loss).backward();
    std::vector<torch::Tensor> gradients;
    for (const auto& p : trained())
      gradients.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros({0}));
    if (options_.autocast_and_scaler) {
      scaler_.step(*optimizer_);
      scaler_.update();
    } else if (zero_) {
      zero_->step(*optimizer_);
    } else if (fsdp_) {
      fsdp_->step(*optimizer_);
    } else {
      optimizer_->step();
    }
    return gradients;
  }

  std::vector<torch::Tensor> trained() const {
    if (zero_) return zero_->parameters();
    if (fsdp_) return fsdp_->parameters();
    return model_->parameters();
  }

 private:
  std::shared_ptr<torch::nn::Module> model_;
  TrainingOptions options_;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<ZeroDataParallel> zero_;
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  amp::GradScaler scaler_;
};

void expect_equal_tensors(const std::vector<torch::Tensor>& got,
                          const std::vector<torch::Tensor>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(torch::equal(got[i], want[i]))
        << what << " " << i << " max diff "
        << (got[i].sizes() == want[i].sizes() ? (got[i] - want[i]).abs().max().item<double>()
                                              : -1.0)
        << " of " << want[i].abs().max().item<double>();
}

at::Generator rank_generator(int rank) {
  return at::make_generator<at::CPUGeneratorImpl>(rank + 1);
}

// Gives `copy` the parameters and buffers of `model` (models made on threads that share the
// default generator draw different initial weights).
void copy_state(torch::nn::Module& model, torch::nn::Module& copy) {
  torch::NoGradGuard no_grad;
  const auto from = model.parameters(), to = copy.parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  const auto from_buffers = model.buffers(), to_buffers = copy.buffers();
  for (size_t i = 0; i < from_buffers.size(); ++i) to_buffers[i].copy_(from_buffers[i]);
}

void expect_checkpointing_changes_nothing(StrategyKind strategy, int world,
                                          TrainingOptions options = {}) {
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    at::Generator generator_of_plain = rank_generator(rank);
    at::Generator generator_of_checkpointed = rank_generator(rank);
    auto plain = std::make_shared<BlockStack>(0.1, false, generator_of_plain);
    auto checkpointed = std::make_shared<BlockStack>(0.1, false, generator_of_checkpointed);
    copy_state(*plain, *checkpointed);
    CheckpointPolicy policy;
    policy.sequential_children = true;
    policy.options.generators = {generator_of_checkpointed};  // the rank's own, not the
    policy.options.preserve_rng_state = false;                // default ones all ranks share
    ASSERT_EQ(checkpoint_modules(*checkpointed, policy).size(), 3u);
    Wrapped a(strategy, plain, group, options), b(strategy, checkpointed, group, options);
    at::Generator data = rank_generator(100 + rank);
    for (int step = 0; step < 3; ++step) {
      const torch::Tensor x = torch::randn({5, 10}, data);
      const auto want = a.step([&] { return plain->forward(x, step, rank).pow(2).mean(); });
      const auto got = b.step([&] { return checkpointed->forward(x, step, rank).pow(2).mean(); });
      expect_equal_tensors(
          got, want,
          "rank " + std::to_string(rank) + " step " + std::to_string(step) + " gradient");
    }
    expect_equal_tensors(b.trained(), a.trained(), "rank " + std::to_string(rank) + " parameter");
  });
}

TEST(CheckpointSameGradients, DdpAtTwoAndThreeRanks) {
  expect_checkpointing_changes_nothing(StrategyKind::kDdp, 2);
  expect_checkpointing_changes_nothing(StrategyKind::kDdp, 3);
}

TEST(CheckpointSameGradients, Zero2) {
  expect_checkpointing_changes_nothing(StrategyKind::kZero2, 2);
}

TEST(CheckpointSameGradients, FullShard) {
  expect_checkpointing_changes_nothing(StrategyKind::kFullShard, 2);
}

TEST(CheckpointSameGradients, DdpWithBfloat16AutocastAndGradScaler) {
  expect_checkpointing_changes_nothing(StrategyKind::kDdp, 2, {/*autocast_and_scaler=*/true});
}

// Conv -> BatchNorm -> ReLU twice, then a head; the BatchNorms made SyncBatchNorms, the conv stack
// one checkpointed span.
struct ConvStack : torch::nn::Module {
  ConvStack() {
    using namespace torch::nn;
    layers =
        register_module("layers", Sequential(Conv2d(Conv2dOptions(1, 4, 3)), BatchNorm2d(4), ReLU(),
                                             Conv2d(Conv2dOptions(4, 4, 3)), BatchNorm2d(4), ReLU(),
                                             Flatten(), Linear(64, 3)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return layers->forward(x); }
  torch::nn::Sequential layers{nullptr};
};

TEST(CheckpointSameGradients, DdpWithSyncBatchNormCountsStatisticsOnce) {
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto make = [&] {
      auto model = std::make_shared<ConvStack>();
      return std::static_pointer_cast<ConvStack>(nn::convert_sync_batchnorm(model, group));
    };
    auto plain = make(), checkpointed = make();
    copy_state(*plain, *checkpointed);
    CheckpointPolicy policy;
    policy.spans = {{"layers", 0, 6}};
    checkpoint_modules(*checkpointed, policy);
    Wrapped a(StrategyKind::kDdp, plain, group), b(StrategyKind::kDdp, checkpointed, group);
    at::Generator data = rank_generator(100 + rank);
    for (int step = 0; step < 3; ++step) {
      const torch::Tensor x = torch::randn({3 + rank, 1, 8, 8}, data);
      const auto want = a.step([&] { return plain->forward(x).pow(2).mean(); });
      const auto got = b.step([&] { return checkpointed->forward(x).pow(2).mean(); });
      expect_equal_tensors(got, want, "gradient at step " + std::to_string(step));
    }
    expect_equal_tensors(b.trained(), a.trained(), "parameter");
    expect_equal_tensors(checkpointed->buffers(), plain->buffers(), "running statistic");
  });
}

}  // namespace activation_checkpoint_parity_test
}  // namespace cohort::testing
