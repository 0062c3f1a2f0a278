// What an ElasticTrainer refuses, before it trains anything: the FSDP strategy and options it
// cannot re-slice, optimizers whose state is not kept per element, and DiLoCo options whose
// rounds it cannot redo over a new generation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/comm/elastic.h"
#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "cohort/torch/local_sgd/local_sgd.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "cohort/torch/optim/lars.h"
#include "elastic_model.h"
#include "support/test_support.h"

namespace cohort {
namespace {

cohort::ElasticOptimizerFactory sgd_factory() {
  return [](const torch::OrderedDict<std::string, torch::Tensor>& parameters) {
    return std::make_unique<torch::optim::SGD>(parameters.values(), torch::optim::SGDOptions(0.1));
  };
}

ElasticTrainerOptions full_shard_options() {
  ElasticTrainerOptions options;
  options.strategy = StrategyKind::kFullShard;
  options.sampler.batch_per_rank = 4;
  return options;
}

void expect_refused(const ElasticTrainerOptions& options, const std::string& words,
                    ElasticOptimizerFactory factory = sgd_factory()) {
  ElasticGroup elastic(std::make_shared<MemoryStore>());
  auto model = testing::make_elastic_model();
  try {
    ElasticTrainer trainer(elastic, model, factory, 100, options);
    ADD_FAILURE() << "the trainer accepted options it cannot train with";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ElasticOptions, NoShardIsRefused) {
  auto options = full_shard_options();
  options.fsdp.strategy = ShardingStrategy::kNoShard;
  expect_refused(options, "is not elastic");
}

TEST(ElasticOptions, CpuOffloadIsRefused) {
  auto offload = full_shard_options();
  offload.fsdp.cpu_offload = true;
  expect_refused(offload, "cpu_offload");
}

TEST(ElasticOptions, ABuddyRefreshOfFewerThanOneStepIsRefused) {
  auto options = full_shard_options();
  options.buddy_refresh_steps = 0;
  expect_refused(options, "buddy_refresh_steps is 0");
}

TEST(ElasticOptions, LarsIsRefusedUnderASharedStrategy) {
  auto options = full_shard_options();
  options.strategy = StrategyKind::kZero1;
  expect_refused(options, "LARS and LAMB",
                 [](const torch::OrderedDict<std::string, torch::Tensor>& parameters) {
                   std::vector<torch::optim::OptimizerParamGroup> groups;
                   groups.emplace_back(parameters.values());
                   return std::make_unique<optim::Lars>(std::move(groups), optim::LarsOptions(0.1));
                 });
}

TEST(ElasticOptions, AnOptimizerInsteadOfAFactoryIsRefusedForAShardedStrategy) {
  ElasticGroup elastic(std::make_shared<MemoryStore>());
  auto model = testing::make_elastic_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  EXPECT_THROW(ElasticTrainer(elastic, model, sgd, 100, full_shard_options()), InvalidArgument);
}

// Refused in the constructor that takes an optimizer, before the trainer joins the job (the
// store is never reached).
void expect_refused_with_an_optimizer(const ElasticTrainerOptions& options,
                                      const std::string& words) {
  ElasticGroup elastic(std::make_shared<MemoryStore>());
  auto model = testing::make_elastic_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  try {
    ElasticTrainer trainer(elastic, model, sgd, 100, options);
    ADD_FAILURE() << "the trainer accepted options it cannot train with";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

void expect_diloco_refused(const DiLoCoOptions& diloco, const std::string& words) {
  ElasticTrainerOptions options;
  options.sampler.batch_per_rank = 4;
  options.diloco = diloco;
  expect_refused_with_an_optimizer(options, words);
}

// Master weights are elastic under ddp, whose optimizer the trainer makes over the masters
// (a factory), and FSDP's strategies; not under ZeRO, which keeps no float32 copy, nor with
// DiLoCo, which averages the model itself. An FSDP param_dtype must be theirs.
TEST(ElasticOptions, MasterWeightsNeedDdpOrFsdpAnOptimizerFactoryAndNoDiLoCo) {
  const PrecisionOptions master = precision_named("bf16", /*master_weights=*/true);
  auto zero = full_shard_options();
  zero.strategy = StrategyKind::kZero2;
  zero.precision = master;
  expect_refused(zero, "are not available under zero2");
  auto other_dtype = full_shard_options();
  other_dtype.precision = master;
  other_dtype.fsdp.mixed_precision.param_dtype = torch::kFloat64;
  expect_refused(other_dtype, "is not the master weights' compute dtype");
  ElasticTrainerOptions diloco;
  diloco.sampler.batch_per_rank = 4;
  diloco.precision = master;
  diloco.diloco = DiLoCoOptions{};
  expect_refused(diloco, "DiLoCo (ElasticTrainerOptions::diloco) averages the model's own");
  ElasticTrainerOptions plain;  // an optimizer over the 16-bit model
  plain.sampler.batch_per_rank = 4;
  plain.precision = master;
  expect_refused_with_an_optimizer(plain, "pass an optimizer factory");
}

TEST(ElasticOptions, HierarchicalOrOverlappedDiLoCoIsRefused) {
  DiLoCoOptions hierarchical;
  hierarchical.hierarchical = true;
  expect_diloco_refused(hierarchical, "hierarchical");
  DiLoCoOptions overlapped;
  overlapped.inner_steps = 4;
  overlapped.overlap_steps = 1;
  expect_diloco_refused(overlapped, "overlap_steps");
}

// DiLoCo is a way of synchronizing ddp: with a sharded kind it is refused by name.
TEST(ElasticOptions, DiLoCoWithAShardedStrategyIsRefused) {
  auto options = full_shard_options();
  options.diloco = DiLoCoOptions{};
  expect_refused(options, "DiLoCo runs under kDdp, not full_shard");
}

// The kind says how FSDP shards: FsdpOptions::strategy saying otherwise is refused.
TEST(ElasticOptions, AnFsdpStrategyThatContradictsTheKindIsRefused) {
  auto options = full_shard_options();
  options.fsdp.strategy = ShardingStrategy::kShardGradOp;
  expect_refused(options, "not what ElasticTrainerOptions::strategy full_shard says");
}

// A SyncBatchNorm reduces over the group it was made with, not over each generation's: after a
// change every step failed and formed one more generation, without an error (issue 58 found
// 1,740 generations in 35 s). Refused by name, under every strategy.
TEST(ElasticOptions, APostLocalSgdHookIsRefusedByName) {
  ElasticTrainerOptions options;
  options.sampler.batch_per_rank = 4;
  options.ddp.comm_hook = post_local_sgd_hook(0, nullptr);
  expect_refused(options, "post_local_sgd_hook, which holds a local group");
}

// Note [Following the generation]: a SyncBatchNorm the model holds, made over another group,
// reduces over the generation's group once the trainer is made.
TEST(ElasticOptions, ASyncBatchNormOfTheModelFollowsTheGeneration) {
  auto other = testing::make_inproc_groups(1)[0];
  auto model = testing::make_elastic_model();
  model->push_back(nn::SyncBatchNorm(torch::nn::BatchNormOptions(4), other));
  ElasticOptions elastic_options;
  elastic_options.initial_size = 1;
  elastic_options.group = testing::quick_options();
  ElasticGroup elastic(std::make_shared<MemoryStore>(), elastic_options);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  ElasticTrainerOptions options;
  options.sampler.batch_per_rank = 4;
  ElasticTrainer trainer(elastic, model, optimizer, 100, options);
  EXPECT_EQ((*model)[3]->as<nn::SyncBatchNorm>()->group(), elastic.group_ptr());
  trainer.finish();
}

// ---------------------------------------------------------------- train_elastic_as

// The strategy layer's options become the trainer's: the kind, the wrappers' options as
// make_strategy makes them, and DiLoCo with the comm hook for its rounds.
TEST(TrainElasticAs, SetsTheKindAndTheWrappersOptions) {
  StrategyOptions wrapping;
  wrapping.bucket_cap_mb = 3;
  wrapping.fsdp_min_unit_parameters = 7;
  ElasticTrainerOptions options;
  options.checkpoint_dir = "kept";
  train_elastic_as(options, StrategyKind::kShardGradOp, wrapping);
  EXPECT_EQ(options.strategy, StrategyKind::kShardGradOp);
  EXPECT_EQ(options.fsdp.strategy, ShardingStrategy::kShardGradOp);
  EXPECT_EQ(options.fsdp.auto_wrap.min_parameters, 7);
  EXPECT_EQ(options.checkpoint_dir, "kept");
  EXPECT_FALSE(options.sync_batchnorm);
  wrapping.sync_batchnorm = true;
  wrapping.precision = precision_named("bf16");
  train_elastic_as(options, StrategyKind::kZero1, wrapping);
  EXPECT_TRUE(options.sync_batchnorm);
  EXPECT_EQ(options.precision.compute_dtype, torch::kBFloat16);
  EXPECT_EQ(options.zero.stage, 1);
  EXPECT_EQ(options.zero.ddp.bucket_cap_mb, 3);
  wrapping.diloco = DiLoCoOptions{};
  wrapping.comm_hook = bf16_compress_hook();
  train_elastic_as(options, StrategyKind::kDdp, wrapping);
  ASSERT_TRUE(options.diloco.has_value());
  EXPECT_EQ(options.diloco->hook, wrapping.comm_hook);
  EXPECT_EQ(options.ddp.comm_hook, nullptr);  // DiLoCo sends no gradients
}

TEST(TrainElasticAs, RefusesWhatTheElasticTrainerDoesNotDoByName) {
  const auto refused = [](StrategyKind kind, const StrategyOptions& wrapping,
                          const std::string& words) {
    ElasticTrainerOptions options;
    try {
      train_elastic_as(options, kind, wrapping);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  StrategyOptions bf16;
  bf16.precision = precision_named("bf16", /*master_weights=*/true);
  refused(StrategyKind::kZero2, bf16, "not available under zero1 and zero2");  // make_strategy's
  for (StrategyKind elastic_masters : {StrategyKind::kDdp, StrategyKind::kFullShard}) {
    ElasticTrainerOptions options;
    train_elastic_as(options, elastic_masters, bf16);
    EXPECT_TRUE(options.precision.master_weights);
  }
  StrategyOptions local_sgd;
  local_sgd.local_sgd = LocalSgdOptions{};
  refused(StrategyKind::kDdp, local_sgd, "local SGD");
  StrategyOptions recompute;
  recompute.activation_checkpointing = CheckpointPolicy{};
  refused(StrategyKind::kDdp, recompute, "checkpoint_modules");
  StrategyOptions hook;  // make_strategy's own refusal
  hook.comm_hook = bf16_compress_hook();
  refused(StrategyKind::kZero2, hook, "work with --strategy ddp only");
}

// Two in-process members train the same steps under ddp (the optimizer factory made once),
// zero2 and full_shard, each set up by train_elastic_as from one StrategyOptions: the losses of
// every step are equal bitwise (the reductions sum in the same order: Note [Reduction order]).
TEST(TrainElasticAs, EveryKindTrainsTheSameStepsFromOneStrategyOptions) {
  constexpr int kWorld = 2;
  constexpr int64_t kTrainSteps = 8;
  const testing::ElasticData data = testing::elastic_data();
  const auto losses_under = [&](StrategyKind kind) {
    std::vector<double> losses;  // the generation's rank 0's, per step
    auto store = std::make_shared<MemoryStore>();
    // Made here: the members' threads would draw their initial weights from one generator.
    std::vector<torch::nn::Sequential> models;
    for (int r = 0; r < kWorld; ++r) models.push_back(testing::make_elastic_model());
    const torch::Tensor initial = models[0]->parameters()[0].clone();
    testing::run_ranks(kWorld, [&](int rank) {
      ElasticOptions elastic_options;
      elastic_options.initial_size = kWorld;
      elastic_options.launch_rank = rank;
      elastic_options.group = testing::quick_options();
      ElasticGroup elastic(store, elastic_options);
      auto& model = models[static_cast<size_t>(rank)];
      ElasticTrainerOptions options;
      options.sampler = testing::elastic_sampler_options(5, 0);
      train_elastic_as(options, kind, StrategyOptions{});
      ElasticTrainer trainer(elastic, model, sgd_factory(),
                             static_cast<size_t>(data.inputs.size(0)), options);
      while (trainer.committed_steps() < kTrainSteps) {
        double loss = 0;
        bool first_member = false;  // the generation's rank 0 (not necessarily launch rank 0)
        const bool committed = trainer.step([&](const ElasticStep& step) {
          const auto rows =
              torch::tensor(std::vector<int64_t>(step.indices.begin(), step.indices.end()));
          const auto l = testing::elastic_loss(*model, data, rows);
          l.backward();
          loss = l.item<double>();
          first_member = step.rank == 0;
        });
        if (committed && first_member) losses.push_back(loss);
      }
      trainer.finish();
      if (kind == StrategyKind::kDdp) {  // it trained: the replica moved from where it started
        EXPECT_FALSE(torch::equal(model->parameters()[0], initial));
      }
    });
    return losses;
  };
  const std::vector<double> ddp = losses_under(StrategyKind::kDdp);
  ASSERT_EQ(ddp.size(), static_cast<size_t>(kTrainSteps));
  EXPECT_EQ(losses_under(StrategyKind::kZero2), ddp);
  EXPECT_EQ(losses_under(StrategyKind::kFullShard), ddp);
}

}  // namespace
}  // namespace cohort
