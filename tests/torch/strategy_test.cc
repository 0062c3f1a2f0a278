// The strategy layer (cohort/torch/strategy/strategy.h): every StrategyKind trains through one
// interface to the same parameters as one process on the whole batch, refuses what it cannot
// train by name, and carries precision, SyncBatchNorm, activation checkpointing, local SGD and
// checkpoints. Ranks are threads over in-process groups.
#include "cohort/torch/strategy/strategy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/compress/quantization.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "cohort/torch/shard/fsdp.h"
#include "support/test_support.h"

namespace cohort {
namespace {

constexpr int kWorld = 2;
constexpr int kPerRank = 3;

torch::nn::Sequential mlp() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(10, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 4));
}

// One model per rank, made here: torch's default generator is one for the process, and rank
// threads drawing from it at once would initialize their models differently.
std::vector<torch::nn::Sequential> models_per_rank(int world = kWorld) {
  std::vector<torch::nn::Sequential> models;
  for (int rank = 0; rank < world; ++rank) models.push_back(mlp());
  return models;
}

// Step `step`'s global batch: kWorld * kPerRank samples, rank r taking rows r*kPerRank...
std::pair<torch::Tensor, torch::Tensor> batch_of(int step) {
  torch::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + step));
  auto inputs = torch::randn({kWorld * kPerRank, 10}, generator);
  auto targets = torch::randn({kWorld * kPerRank, 4}, generator);
  return {inputs, targets};
}

torch::Tensor slice_loss(torch::nn::Sequential& model, int step, int rank) {
  const auto [inputs, targets] = batch_of(step);
  const auto rows = inputs.narrow(0, rank * kPerRank, kPerRank);
  return torch::mse_loss(model->forward(rows), targets.narrow(0, rank * kPerRank, kPerRank));
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.parameters()) out.push_back(p.detach().clone());
  return out;
}

// One process's gradient of step `step`: each rank's slice gradient computed on its own, summed
// in rank order and divided by the world (what the ranks' reduction computes; at two ranks, in
// any order).
std::vector<torch::Tensor> averaged_slice_gradients(torch::nn::Sequential& model, int step) {
  std::vector<torch::Tensor> sum;
  for (int rank = 0; rank < kWorld; ++rank) {
    model->zero_grad();
    slice_loss(model, step, rank).backward();
    const auto parameters = model->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      if (rank == 0) {
        sum.push_back(parameters[i].grad().clone());
      } else {
        sum[i] += parameters[i].grad();
      }
    }
  }
  for (auto& g : sum) g /= kWorld;
  return sum;
}

std::vector<torch::Tensor> reference_training(int steps) {
  auto model = mlp();
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(0.01));
  for (int step = 0; step < steps; ++step) {
    const auto gradients = averaged_slice_gradients(model, step);
    for (size_t i = 0; i < gradients.size(); ++i) {
      model->parameters()[i].mutable_grad() = gradients[i];
    }
    optimizer.step();
  }
  return snapshot(*model);
}

// The first `steps` steps of `rank`'s slices through `run`, forwards under its scope.
void train_steps(Strategy& run, torch::optim::Optimizer& optimizer, torch::nn::Sequential& model,
                 int rank, int steps) {
  for (int step = 0; step < steps; ++step) {
    run.zero_grad(optimizer);
    torch::Tensor loss;
    {
      auto autocast = run.forward_scope();
      loss = slice_loss(model, step, rank);
    }
    run.backward(loss);
    run.step(optimizer);
  }
}

// Every rank's model after `steps` through make_strategy(kind); whole parameters gathered.
std::vector<std::vector<torch::Tensor>> strategy_training(StrategyKind kind, int steps,
                                                          const StrategyOptions& options = {}) {
  auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
  std::vector<std::vector<torch::Tensor>> result(kWorld);
  auto models = models_per_rank();
  testing::run_ranks(kWorld, [&](int rank) {
    auto& model = models[rank];
    auto run = make_strategy(kind, model, groups[rank], options);
    torch::optim::AdamW optimizer(run->optimizer_parameters().values(),
                                  torch::optim::AdamWOptions(0.01));
    train_steps(*run, optimizer, model, rank, steps);
    const auto whole = run->whole_parameters();
    result[rank] = snapshot(*model);
  });
  return result;
}

TEST(StrategyLayer, EveryKindEqualsOneProcessBitwiseAtTwoRanks) {
  const auto want = reference_training(10);
  for (StrategyKind kind : {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2,
                            StrategyKind::kFullShard, StrategyKind::kShardGradOp}) {
    SCOPED_TRACE(strategy_name(kind));
    const auto got = strategy_training(kind, 10);
    for (int rank = 0; rank < kWorld; ++rank) {
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_TRUE(torch::equal(got[rank][i], want[i]))
            << "rank " << rank << " parameter " << i << ": max |difference| "
            << (got[rank][i] - want[i]).abs().max().item<double>();
      }
    }
  }
}

// Clipping reduces the norm over every rank's shards: the whole model's, on every rank.
TEST(StrategyLayer, ClippingReturnsTheWholeModelsNormOnEveryRank) {
  auto reference = mlp();
  double squares = 0;
  for (const auto& g : averaged_slice_gradients(reference, 0))
    squares += g.pow(2).sum().item<double>();
  const double want = std::sqrt(squares);
  for (StrategyKind kind : {StrategyKind::kDdp, StrategyKind::kZero2, StrategyKind::kFullShard}) {
    SCOPED_TRACE(strategy_name(kind));
    auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
    auto models = models_per_rank();
    testing::run_ranks(kWorld, [&](int rank) {
      auto& model = models[rank];
      auto run = make_strategy(kind, model, groups[rank]);
      torch::optim::SGD optimizer(run->optimizer_parameters().values(), 0.1);
      run->zero_grad(optimizer);
      run->backward(slice_loss(model, 0, rank));
      EXPECT_NEAR(run->clip_gradients(optimizer, 1e-3), want, 1e-5 * want);
    });
  }
}

void expect_refused(StrategyKind kind, const StrategyOptions& options, const std::string& says) {
  try {
    check_strategy_options(kind, options);
    ADD_FAILURE() << strategy_name(kind) << " accepted what it cannot train: " << says;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(StrategyLayer, RefusesWhatAStrategyCannotTrainByName) {
  StrategyOptions hook;
  hook.comm_hook = allreduce_hook();
  expect_refused(StrategyKind::kZero1, hook, "work with --strategy ddp only (zero1 shards");
  StrategyOptions diloco;
  diloco.diloco = DiLoCoOptions{};
  expect_refused(StrategyKind::kFullShard, diloco, "--diloco) work with --strategy ddp only");
  StrategyOptions master;
  master.precision = precision_named("bf16", /*master_weights=*/true);
  expect_refused(StrategyKind::kZero2, master, "use --strategy ddp, or full_shard");
  StrategyOptions local_sgd_and_hook = hook;
  local_sgd_and_hook.local_sgd = LocalSgdOptions{};
  expect_refused(StrategyKind::kDdp, local_sgd_and_hook, "local SGD (--local-sgd) and a comm hook");
  StrategyOptions diloco_and_master = diloco;
  diloco_and_master.precision = master.precision;
  expect_refused(StrategyKind::kDdp, diloco_and_master, "does not combine with local SGD");
  StrategyOptions local_sgd_and_master = master;
  local_sgd_and_master.local_sgd = LocalSgdOptions{};
  expect_refused(StrategyKind::kDdp, local_sgd_and_master,
                 "local SGD (--local-sgd) averages the model's own parameters");
  StrategyOptions compression_and_master = master;
  compression_and_master.comm_hook = std::make_shared<QsgdHook>();
  expect_refused(StrategyKind::kDdp, compression_and_master, "compresses float32 gradients");
  PrecisionOptions integer;
  integer.compute_dtype = torch::kInt32;
  EXPECT_THROW(Precision{integer}, InvalidArgument);
  try {
    Precision master_in_float32(precision_named("fp32", /*master_weights=*/true));
    ADD_FAILURE() << "master weights in float32 were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("give it with --precision bf16"), std::string::npos)
        << e.what();
  }
  try {
    Precision fp16_on_a_cpu(precision_named("fp16"));
    ADD_FAILURE() << "fp16 autocast on a CPU was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16"), std::string::npos) << e.what();
  }
}

TEST(StrategyLayer, AllowedStrategiesFollowTheOptions) {
  EXPECT_EQ(strategies_allowed({}), all_strategy_kinds());
  StrategyOptions hook;
  hook.comm_hook = allreduce_hook();
  EXPECT_EQ(strategies_allowed(hook), std::vector<StrategyKind>{StrategyKind::kDdp});
  StrategyOptions master;
  master.precision = precision_named("bf16", true);
  EXPECT_EQ(strategies_allowed(master),
            (std::vector<StrategyKind>{StrategyKind::kDdp, StrategyKind::kFullShard,
                                       StrategyKind::kShardGradOp, StrategyKind::kHybridShard}));
  for (StrategyKind kind : all_strategy_kinds()) {
    EXPECT_EQ(strategy_named(strategy_name(kind)), kind);
  }
  EXPECT_FALSE(strategy_named("fsdp").has_value());
  EXPECT_EQ(fsdp_sharding_of(StrategyKind::kShardGradOp), ShardingStrategy::kShardGradOp);
  EXPECT_EQ(fsdp_sharding_of(StrategyKind::kHybridShard), ShardingStrategy::kHybridShard);
  EXPECT_THROW(fsdp_sharding_of(StrategyKind::kZero2), InvalidArgument);
}

// SyncBatchNorm conversion and activation checkpointing happen before the wrapping.
TEST(StrategyLayer, PreparesTheModelBeforeWrappingIt) {
  auto groups = testing::make_inproc_groups(1, testing::quick_options());
  torch::nn::Sequential with_bn(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                torch::nn::Linear(8, 2));
  StrategyOptions options;
  options.sync_batchnorm = true;
  CheckpointPolicy last_layer;
  last_layer.paths = {"2"};
  options.activation_checkpointing = last_layer;
  auto run = make_strategy(StrategyKind::kDdp, with_bn, groups[0], options);
  EXPECT_TRUE(std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(with_bn[1]) != nullptr);
  EXPECT_EQ(run->checkpointed_regions(), std::vector<std::string>{"2"});
  torch::nn::Sequential without_bn(torch::nn::Linear(4, 2));
  StrategyOptions sync_only;
  sync_only.sync_batchnorm = true;
  EXPECT_THROW(make_strategy(StrategyKind::kDdp, without_bn, groups[0], sync_only),
               InvalidArgument);
}

// Local SGD lets the replicas drift between averagings; synchronize() makes them equal.
TEST(StrategyLayer, SynchronizeAveragesLocalSgdReplicasNow) {
  StrategyOptions options;
  options.local_sgd = LocalSgdOptions{};
  options.local_sgd->period = 100;
  options.local_sgd->warmup_steps = 0;
  auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
  std::vector<std::vector<torch::Tensor>> before(kWorld), after(kWorld);
  auto models = models_per_rank();
  testing::run_ranks(kWorld, [&](int rank) {
    auto& model = models[rank];
    auto run = make_strategy(StrategyKind::kDdp, model, groups[rank], options);
    torch::optim::SGD optimizer(run->optimizer_parameters().values(), 0.1);
    for (int step = 1; step < 3; ++step) {  // the averager's call 0 averages: start after it
      run->zero_grad(optimizer);
      run->backward(slice_loss(model, step, rank));
      run->step(optimizer);
    }
    before[rank] = snapshot(*model);
    run->synchronize(optimizer);
    after[rank] = snapshot(*model);
  });
  EXPECT_FALSE(torch::equal(before[0][0], before[1][0]));
  for (size_t i = 0; i < after[0].size(); ++i) EXPECT_TRUE(torch::equal(after[0][i], after[1][i]));
}

// A sharded checkpoint written in the background under FULL_SHARD loads under ZeRO-2.
TEST(StrategyLayer, ShardedCheckpointLoadsUnderAnotherStrategy) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("cohort_strategy_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
  std::vector<std::vector<torch::Tensor>> saved(kWorld), loaded(kWorld);
  auto models = models_per_rank(), fresh_models = models_per_rank();
  testing::run_ranks(kWorld, [&](int rank) {
    auto& model = models[rank];
    auto run = make_strategy(StrategyKind::kFullShard, model, groups[rank]);
    torch::optim::AdamW optimizer(run->optimizer_parameters().values(),
                                  torch::optim::AdamWOptions(0.01));
    train_steps(*run, optimizer, model, rank, 3);
    TrainingState state;
    state.module = model.ptr().get();
    state.optimizer = &optimizer;
    state.step = 3;
    run->save(directory.string(), state);
    run->finish_checkpoints();
    EXPECT_EQ(run->checkpoint_stats().saves, 1);
    {
      const auto whole = run->whole_parameters();
      saved[rank] = snapshot(*model);
    }
    auto& fresh = fresh_models[rank];
    auto zero = make_strategy(StrategyKind::kZero2, fresh, groups[rank]);
    torch::optim::AdamW fresh_optimizer(zero->optimizer_parameters().values(),
                                        torch::optim::AdamWOptions(0.01));
    TrainingState into;
    into.module = fresh.ptr().get();
    into.optimizer = &fresh_optimizer;
    EXPECT_TRUE(zero->load(directory.string(), into));
    EXPECT_EQ(into.step, 3);
    loaded[rank] = snapshot(*fresh);
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    for (size_t i = 0; i < saved[0].size(); ++i)
      EXPECT_TRUE(torch::equal(saved[rank][i], loaded[rank][i])) << "rank " << rank << " " << i;
  }
  std::filesystem::remove_all(directory);
}

// FULL_SHARD under master weights: the float32 shards are the masters and the sharded checkpoint
// holds them (its manifest once described the units' 16-bit parameters, so that no run could
// load it); a fresh FULL_SHARD run over master weights and a float32 ZeRO-2 run both resume them.
TEST(StrategyLayer, AFullShardCheckpointOverMasterWeightsResumesItsMasters) {
  const auto directory = std::filesystem::temp_directory_path() /
                         ("cohort_strategy_master_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  StrategyOptions master;
  master.precision = precision_named("bf16", /*master_weights=*/true);
  auto groups = testing::make_inproc_groups(kWorld, testing::quick_options());
  std::vector<std::vector<torch::Tensor>> saved(kWorld), resumed(kWorld), in_float32(kWorld);
  auto models = models_per_rank(), sharded = models_per_rank(), replicas = models_per_rank();
  testing::run_ranks(kWorld, [&](int rank) {
    auto train = [&](torch::nn::Sequential& model, StrategyKind kind, const StrategyOptions& o,
                     int steps, std::vector<torch::Tensor>& masters) {
      auto run = make_strategy(kind, model, groups[rank], o);
      torch::optim::AdamW optimizer(run->optimizer_parameters().values(),
                                    torch::optim::AdamWOptions(0.01));
      TrainingState state;
      state.module = model.ptr().get();
      state.optimizer = &optimizer;
      const bool loaded = run->load(directory.string(), state);
      EXPECT_EQ(loaded, steps == 0);
      train_steps(*run, optimizer, model, rank, steps);
      state.step = steps;
      if (steps > 0) run->save(directory.string(), state);
      run->finish_checkpoints();
      // ZeRO-2's module holds the whole float32 parameters; FSDP's masters are its shards.
      const auto held =
          kind == StrategyKind::kZero2 ? model->parameters() : run->optimizer_parameters().values();
      for (const auto& t : held) masters.push_back(t.detach().clone());
    };
    train(models[rank], StrategyKind::kFullShard, master, 3, saved[rank]);
    train(sharded[rank], StrategyKind::kFullShard, master, 0, resumed[rank]);
    train(replicas[rank], StrategyKind::kZero2, {}, 0, in_float32[rank]);
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_EQ(resumed[rank].size(), saved[rank].size());
    for (size_t i = 0; i < saved[rank].size(); ++i) {
      EXPECT_EQ(saved[rank][i].scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(saved[rank][i], resumed[rank][i])) << "rank " << rank << " " << i;
    }
  }
  // The ZeRO-2 run's whole float32 model is the saved run's, whose FSDP gave its module the
  // whole float32 masters back when it went.
  for (int rank = 0; rank < kWorld; ++rank) {
    const auto written = snapshot(*models[rank]);
    ASSERT_EQ(written.size(), in_float32[rank].size());
    for (size_t i = 0; i < written.size(); ++i) {
      EXPECT_EQ(written[i].scalar_type(), torch::kFloat32);
      EXPECT_TRUE(torch::equal(written[i], in_float32[rank][i])) << "rank " << rank << " " << i;
    }
  }
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace cohort
