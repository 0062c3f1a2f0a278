// FullyShardedDataParallel beyond the numbers: parameters really hold no memory between uses,
// what each strategy holds (FsdpMemoryReport against docs/sharding.md's formulas), evaluation,
// the full-parameter scope, and mistakes that must be clear errors.
#include <gtest/gtest.h>

#include <set>

#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "cohort/torch/fsdp.h"
#include "ddp_harness.h"
#include "support/test_support.h"

namespace cohort::testing {
namespace {

// Eight equal Linear blocks (and their activations) in a Sequential: its children are the
// default units (the activations have no parameters and form none).
torch::nn::Sequential interleaved_blocks() {
  torch::nn::Sequential net;
  for (int i = 0; i < 8; ++i) {
    net->push_back(torch::nn::Linear(32, 32));
    net->push_back(torch::nn::Tanh());
  }
  return net;
}

size_t block_bytes() {
  return (32 * 32 + 32) * sizeof(float);
}

// Distinct storages: a unit's parameters share one.
size_t storage_bytes(const torch::nn::Module& module) {
  size_t bytes = 0;
  std::set<const void*> seen;
  for (const auto& p : module.parameters()) {
    if (seen.insert(p.storage().unsafeGetStorageImpl()).second) bytes += p.storage().nbytes();
  }
  return bytes;
}

FsdpOptions with(ShardingStrategy strategy) {
  FsdpOptions options;
  options.strategy = strategy;
  return options;
}

TEST(Fsdp, ParametersHoldNoMemoryBetweenUses) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    torch::manual_seed(3);
    auto net = interleaved_blocks();
    FullyShardedDataParallel fsdp(net, group, with(ShardingStrategy::kFullShard));
    EXPECT_EQ(fsdp.unit_names().size(), 8u);
    EXPECT_EQ(storage_bytes(*net), 0u);
    torch::optim::AdamW optimizer(fsdp.parameters());
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      net->forward(torch::randn({4, 32})).pow(2).mean().backward();
      fsdp.step(optimizer);
      EXPECT_EQ(storage_bytes(*net), 0u) << "after step " << step;
      EXPECT_EQ(fsdp.memory().gathered, 0u);
    }
  });
}

// FULL_SHARD keeps at most the unit in use and the one prefetched; SHARD_GRAD_OP keeps every
// unit from its forward to its backward.
TEST(Fsdp, PeakGatheredIsTwoUnitsUnderFullShardAndTheModelUnderShardGradOp) {
  for (auto strategy : {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp}) {
    std::vector<size_t> peaks(2);
    run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
      torch::manual_seed(3);
      auto net = interleaved_blocks();
      FullyShardedDataParallel fsdp(net, group, with(strategy));
      torch::optim::SGD optimizer(fsdp.parameters(), torch::optim::SGDOptions(0.1));
      for (int step = 0; step < 3; ++step) {  // the first records the order prefetch follows
        if (step == 2) fsdp.reset_peak_memory();
        optimizer.zero_grad();
        net->forward(torch::randn({4, 32})).pow(2).mean().backward();
        fsdp.step(optimizer);
      }
      peaks[rank] = fsdp.memory().peak_gathered;
    });
    SCOPED_TRACE(sharding_strategy_name(strategy));
    for (size_t peak : peaks) {
      if (strategy == ShardingStrategy::kFullShard) {
        EXPECT_LE(peak, 2 * block_bytes());
        EXPECT_GE(peak, block_bytes());
      } else {
        EXPECT_EQ(peak, 8 * block_bytes());
      }
    }
  }
}

// With Adam, model state per rank is 16/W bytes per parameter plus what is gathered
// (docs/sharding.md): 4/W of shards, 4/W of gradient shards, 8/W of optimizer state.
TEST(Fsdp, MemoryReportMatchesTheFormula) {
  for (int world : {2, 4}) {
    std::vector<FsdpMemoryReport> reports(world);
    run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
      torch::manual_seed(3);
      auto net = interleaved_blocks();
      FullyShardedDataParallel fsdp(net, group, with(ShardingStrategy::kFullShard));
      torch::optim::AdamW optimizer(fsdp.parameters());
      optimizer.zero_grad();
      net->forward(torch::randn({4, 32})).pow(2).mean().backward();
      fsdp.step(optimizer);
      reports[rank] = fsdp.memory(&optimizer);
    });
    const size_t total = 8 * block_bytes();  // 8 x 1,056 elements: divisible by 2 and 4
    for (const auto& r : reports) {
      EXPECT_EQ(r.parameter_shards, total / world);
      EXPECT_EQ(r.gradients, total / world);
      // AdamW keeps exp_avg and exp_avg_sq per element, and a step count per tensor.
      EXPECT_GE(r.optimizer_state, 2 * total / world);
      EXPECT_LE(r.optimizer_state, 2 * total / world + 8 * 64);
      EXPECT_EQ(r.gathered, 0u);
    }
  }
}

// Every unit's gradients are reduced once per synchronized backward, and the timeline shows
// each unit's all-gathers and reduce-scatter.
TEST(Fsdp, IterationStatsAndTimeline) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    torch::manual_seed(3);
    auto net = interleaved_blocks();
    FsdpOptions options;
    options.timeline = std::make_shared<Timeline>("unused.json");
    FullyShardedDataParallel fsdp(net, group, options);
    torch::optim::SGD optimizer(fsdp.parameters(), torch::optim::SGDOptions(0.1));
    net->forward(torch::randn({4, 32})).pow(2).mean().backward();
    fsdp.step(optimizer);
    const IterationStats& stats = fsdp.last_iteration_stats();
    ASSERT_EQ(stats.buckets.size(), 8u);
    for (const auto& b : stats.buckets) EXPECT_EQ(b.bytes, block_bytes());
    int gathers = 0, reductions = 0;
    for (const auto& span : options.timeline->spans()) {
      if (span.name == "unit 6 all-gather") ++gathers;
      if (span.name == "unit 6 reduce-scatter") ++reductions;
    }
    EXPECT_EQ(gathers, 2);  // forward, and again for backward
    EXPECT_EQ(reductions, 1);
  });
}

TEST(Fsdp, EvaluationFreesAsItGoesAndReshardFreesTheRest) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    torch::manual_seed(3);
    auto net = interleaved_blocks();
    FullyShardedDataParallel fsdp(net, group, with(ShardingStrategy::kShardGradOp));
    fsdp.reset_peak_memory();
    {
      torch::NoGradGuard no_grad;
      net->forward(torch::randn({4, 32}));
    }
    // Even SHARD_GRAD_OP frees after use when no backward will come.
    EXPECT_LE(fsdp.memory().peak_gathered, 2 * block_bytes());
    EXPECT_LE(fsdp.memory().gathered, block_bytes());
    fsdp.reshard();
    EXPECT_EQ(fsdp.memory().gathered, 0u);
    EXPECT_EQ(storage_bytes(*net), 0u);
  });
}

// The whole model through an ordinary forward, gathered unit by unit, equals the whole model in
// the full-parameter scope, and writes in a writeback scope reach the shards.
TEST(Fsdp, FullParametersScope) {
  run_with_groups(3, [](int, std::shared_ptr<Group> group) {
    torch::manual_seed(3);
    auto net = interleaved_blocks();
    FullyShardedDataParallel fsdp(net, group, with(ShardingStrategy::kFullShard));
    const auto x = torch::randn({4, 32});
    torch::Tensor sharded_output;
    {
      torch::NoGradGuard no_grad;
      sharded_output = net->forward(x);
    }
    {
      auto full = fsdp.full_parameters();
      EXPECT_EQ(storage_bytes(*net), 8 * block_bytes());
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(torch::equal(net->forward(x), sharded_output));
    }
    EXPECT_EQ(fsdp.memory().gathered, 0u);
    {
      auto full = fsdp.full_parameters(/*writeback=*/true);
      torch::NoGradGuard no_grad;
      for (auto& p : net->parameters()) p.fill_(0.5);
    }
    for (const auto& shard : fsdp.parameters()) {
      if (shard.numel() > 0) EXPECT_TRUE(torch::all(shard == 0.5).item<bool>());
    }
    torch::NoGradGuard no_grad;
    EXPECT_TRUE(torch::all(net->parameters()[5] == 0.5).item<bool>());  // gathered on use
  });
}

// After destruction every parameter holds memory of its own with the trained values.
TEST(Fsdp, DestructionGivesTheParametersBack) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    torch::manual_seed(3);
    auto net = interleaved_blocks();
    std::vector<torch::Tensor> trained;
    {
      FullyShardedDataParallel fsdp(net, group, with(ShardingStrategy::kFullShard));
      torch::optim::SGD optimizer(fsdp.parameters(), torch::optim::SGDOptions(0.1));
      net->forward(torch::randn({4, 32})).pow(2).mean().backward();
      fsdp.step(optimizer);
      auto full = fsdp.full_parameters();
      for (const auto& p : net->parameters()) trained.push_back(p.detach().clone());
    }
    EXPECT_EQ(storage_bytes(*net), 8 * block_bytes());
    for (size_t i = 0; i < trained.size(); ++i) {
      EXPECT_TRUE(torch::equal(net->parameters()[i], trained[i]));
    }
  });
}

TEST(FsdpErrors, ModelsThatDifferAcrossRanksAreNamed) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    auto net = layers({8, rank == 0 ? 16 : 17, 4});
    FullyShardedDataParallel fsdp(net, group);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("0.weight"), std::string::npos) << e;
}

TEST(FsdpErrors, OptimizerOverTheModelsParameters) {
  const auto errors = errors_of(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({8, 16, 4});
    FullyShardedDataParallel fsdp(net, group);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
    fsdp.step(optimizer);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("not one of this rank's shards"), std::string::npos) << e;
  }
}

TEST(FsdpErrors, UnitWrappedTwiceOrUnknown) {
  auto net = layers({8, 16, 4});
  const auto group = make_inproc_groups(1).front();
  FsdpOptions twice;
  twice.units = {"0", "1", "0"};
  try {
    FullyShardedDataParallel fsdp(net, group, twice);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'0' is wrapped twice"), std::string::npos) << e.what();
  }
  FsdpOptions unknown;
  unknown.units = {"encoder"};
  try {
    FullyShardedDataParallel fsdp(net, group, unknown);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'encoder', which is not a submodule"), std::string::npos)
        << e.what();
  }
}

TEST(FsdpErrors, CpuOffloadOfACpuModelAndLbfgs) {
  auto net = layers({8, 16, 4});
  const auto group = make_inproc_groups(1).front();
  FsdpOptions offload;
  offload.cpu_offload = true;
  EXPECT_THROW(FullyShardedDataParallel(net, group, offload), InvalidArgument);
  FsdpOptions half;
  half.mixed_precision.param_dtype = torch::kBFloat16;
  EXPECT_THROW(FullyShardedDataParallel(net, group, half), InvalidArgument);
  FullyShardedDataParallel fsdp(net, group);
  torch::optim::LBFGS lbfgs(fsdp.parameters());
  try {
    fsdp.step(lbfgs);
    ADD_FAILURE() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("LBFGS needs whole tensors"), std::string::npos);
  }
}

TEST(FsdpErrors, HybridShardOnUnevenNodes) {
  auto store = std::make_shared<MemoryStore>();
  const std::vector<std::string> node_of = {"a", "b", "a"};
  std::vector<std::string> errors(3);
  run_ranks(3, [&](int rank) {
    GroupOptions options = quick_options(std::chrono::seconds(60));
    options.host = "127.0.0.1";
    options.node_id = node_of[rank];
    auto group = Group::create(store, rank, 3, options);
    FsdpOptions hybrid;
    hybrid.strategy = ShardingStrategy::kHybridShard;
    try {
      FullyShardedDataParallel fsdp(layers({8, 16, 4}), group, hybrid);
    } catch (const InvalidArgument& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("HYBRID_SHARD needs the same number of ranks on every node"),
              std::string::npos)
        << e;
  }
}

}  // namespace
}  // namespace cohort::testing
