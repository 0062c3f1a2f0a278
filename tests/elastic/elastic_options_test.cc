// What an ElasticTrainer refuses, before it trains anything: the FSDP strategy and options it
// cannot re-slice, optimizers whose state is not kept per element, and DiLoCo options whose
// rounds it cannot redo over a new generation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "cohort/comm/elastic.h"
#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "cohort/torch/elastic/elastic_trainer.h"
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

TEST(ElasticOptions, CpuOffloadAndParamDtypeAreRefused) {
  auto offload = full_shard_options();
  offload.fsdp.cpu_offload = true;
  expect_refused(offload, "cpu_offload");
  auto bf16 = full_shard_options();
  bf16.fsdp.mixed_precision.param_dtype = torch::kBFloat16;
  expect_refused(bf16, "param_dtype");
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

// Refused in the constructor, before the trainer joins the job (the store is never reached).
void expect_diloco_refused(const DiLoCoOptions& diloco, const std::string& words) {
  ElasticGroup elastic(std::make_shared<MemoryStore>());
  auto model = testing::make_elastic_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  ElasticTrainerOptions options;
  options.sampler.batch_per_rank = 4;
  options.diloco = diloco;
  try {
    ElasticTrainer trainer(elastic, model, sgd, 100, options);
    ADD_FAILURE() << "the trainer accepted DiLoCo options it cannot train with";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
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

TEST(ElasticOptions, AFactoryInsteadOfAnOptimizerIsRefusedForDiLoCo) {
  ElasticTrainerOptions options;
  options.diloco = DiLoCoOptions{};
  options.sampler.batch_per_rank = 4;
  expect_refused(options, "pass the optimizer itself");
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
TEST(ElasticOptions, AModelWithSyncBatchNormIsRefusedByName) {
  auto group = testing::make_inproc_groups(1)[0];
  auto model = testing::make_elastic_model();
  model->push_back(nn::SyncBatchNorm(torch::nn::BatchNormOptions(4), group));
  ElasticGroup elastic(std::make_shared<MemoryStore>());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  ElasticTrainerOptions options;
  options.sampler.batch_per_rank = 4;
  try {
    ElasticTrainer trainer(elastic, model, optimizer, 100, options);
    ADD_FAILURE() << "a model with a SyncBatchNorm was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("holds a cohort::nn::SyncBatchNorm ('3')"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort
