// ZeroDataParallel beyond the numbers: how the shards tile the parameters, what each stage
// holds (MemoryReport against the formulas of docs/sharding.md), and mistakes that must be
// clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "bucket_plan.h"
#include "cohort/comm/timeline.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint.h"
#include "cohort/torch/zero.h"
#include "ddp_harness.h"
#include "shard/shard_layout.h"

namespace cohort::testing {
namespace {

TEST(ShardLayout, BlocksSplitParametersThatCrossThem) {
  // A bucket of 10 elements padded to 12 over 3 ranks (blocks of 4): a parameter at [2, 9).
  EXPECT_EQ(shard_of(2, 7, 12, 3, 0).length, 2);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 0).parameter_offset, 0);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 0).block_offset, 2);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 1).parameter_offset, 2);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 1).block_offset, 0);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 1).length, 4);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 2).parameter_offset, 6);
  EXPECT_EQ(shard_of(2, 7, 12, 3, 2).length, 1);
  EXPECT_EQ(shard_of(0, 2, 12, 3, 2).length, 0);  // none of it on rank 2
  EXPECT_EQ(shard_of(0, 0, 12, 3, 0).length, 0);  // an empty parameter
}

TEST(ShardLayout, EveryElementHasExactlyOneOwner) {
  for (int world : {1, 2, 3, 5, 8}) {
    const int64_t bucket = 7 * world;
    for (int64_t offset = 0; offset < bucket; offset += 3) {
      for (int64_t numel = 0; offset + numel <= bucket; numel += 5) {
        std::vector<int> owners(static_cast<size_t>(numel), 0);
        for (int rank = 0; rank < world; ++rank) {
          const ShardRange r = shard_of(offset, numel, bucket, world, rank);
          if (r.length == 0) continue;
          ASSERT_GE(r.block_offset, 0);
          ASSERT_LE(r.block_offset + r.length, bucket / world);
          ASSERT_EQ(offset + r.parameter_offset, rank * (bucket / world) + r.block_offset)
              << "world " << world << " rank " << rank;
          for (int64_t i = 0; i < r.length; ++i) ++owners[r.parameter_offset + i];
        }
        for (int count : owners) ASSERT_EQ(count, 1) << "world " << world;
      }
    }
  }
}

int64_t numel_of(const std::vector<torch::Tensor>& tensors) {
  int64_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  return total;
}

// The elements of each bucket the reducer makes for `net` (bucket_plan.h: reverse registration
// order, DDP's caps), padded to a multiple of world as ZeRO pads them.
std::vector<int64_t> padded_buckets(torch::nn::Module& net, const DdpOptions& ddp, int world) {
  const auto parameters = net.parameters();
  const auto cap = [](double mb) { return static_cast<size_t>(mb * 1024.0 * 1024.0); };
  BucketPlanInput plan{{}, {}, {}, cap(ddp.first_bucket_cap_mb), cap(ddp.bucket_cap_mb)};
  for (size_t i = 0; i < parameters.size(); ++i) {
    plan.order.push_back(parameters.size() - 1 - i);
    plan.bytes.push_back(parameters[i].nbytes());
    plan.kind.push_back(0);
  }
  std::vector<int64_t> padded;
  for (const auto& members : plan_buckets(plan)) {
    int64_t numel = 0;
    for (size_t p : members) numel += parameters[p].numel();
    padded.push_back((numel + world - 1) / world * world);
  }
  return padded;
}

int64_t sum_of(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (int64_t v : values) total += v;
  return total;
}

struct RankMemory {
  MemoryReport after_step;
  int64_t owned = 0;             // elements of this rank's shards
  int64_t parameters = 0;        // elements of the model's trainable parameters
  std::vector<int64_t> buckets;  // padded elements of each bucket
};

// One AdamW step of a 3-layer MLP (14k parameters, 2 buckets) at each stage.
std::vector<RankMemory> memory_after_one_step(int world, int stage) {
  std::vector<RankMemory> memory(world);
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    torch::manual_seed(1);
    auto net = layers({40, 100, 100, 7});
    ZeroOptions options;
    options.stage = stage;
    options.ddp.first_bucket_cap_mb = 0.01;
    options.ddp.bucket_cap_mb = 0.03;
    const auto buckets = padded_buckets(*net, options.ddp, world);
    ZeroDataParallel zero(net, group, options);
    torch::optim::AdamW optimizer(zero.parameters());
    optimizer.zero_grad();
    net->forward(torch::randn({5, 40})).pow(2).mean().backward();
    zero.step(optimizer);
    memory[rank] = {zero.memory(&optimizer), numel_of(zero.parameters()),
                    numel_of(net->parameters()), buckets};
  });
  return memory;
}

TEST(ZeroMemory, StagesHoldWhatTheFormulasSay) {
  for (int world : {1, 2, 3, 4}) {
    for (int stage : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world) + " stage " + std::to_string(stage));
      const auto memory = memory_after_one_step(world, stage);
      int64_t owned_everywhere = 0;
      for (const auto& m : memory) {
        owned_everywhere += m.owned;
        const int64_t n = m.parameters;
        const int64_t padded = sum_of(m.buckets);
        // Whole on every rank, in one flat tensor per bucket (Note [Flat parameters]).
        EXPECT_EQ(m.after_step.parameters, 4u * padded);
        EXPECT_EQ(m.after_step.optimizer_state, 8u * m.owned);  // AdamW's two moments
        // Blocks are a world's share of the padded buckets (2 of them here).
        EXPECT_LE(m.owned, padded / world);
        const size_t own_grads = 4u * m.owned;
        if (stage == 1) {  // + a bucket of own gradients for the whole model (padded)
          EXPECT_EQ(m.after_step.gradients, own_grads + 4u * padded);
        } else {  // the buckets are gone once reduced
          EXPECT_EQ(m.after_step.gradients, own_grads);
        }
        EXPECT_GE(m.after_step.peak_gradients, m.after_step.gradients);
        EXPECT_LT(padded - n, 2 * world);
      }
      EXPECT_EQ(owned_everywhere, memory[0].parameters);  // the shards tile the model
    }
  }
}

TEST(ZeroTimeline, RecordsEachBucketsReduceScatterAndAllGather) {
  for (int stage : {1, 2}) {
    run_with_groups(2, [&](int, std::shared_ptr<Group> group) {
      auto net = layers({40, 100, 100, 7});
      ZeroOptions options;
      options.stage = stage;
      options.ddp.first_bucket_cap_mb = 0.01;
      options.ddp.bucket_cap_mb = 0.03;
      options.ddp.timeline = std::make_shared<Timeline>("unused.json");
      const size_t buckets = padded_buckets(*net, options.ddp, 2).size();
      ZeroDataParallel zero(net, group, options);
      torch::optim::SGD optimizer(zero.parameters(), torch::optim::SGDOptions(0.1));
      net->forward(torch::randn({5, 40})).pow(2).mean().backward();
      zero.step(optimizer);
      std::multiset<std::string> names;
      for (const auto& span : options.ddp.timeline->spans()) names.insert(span.name);
      for (size_t b = 0; b < buckets; ++b) {
        EXPECT_EQ(names.count("bucket " + std::to_string(b) + " reduce_scatter"), 1u) << b;
        EXPECT_EQ(names.count("bucket " + std::to_string(b) + " allgather"), 1u) << b;
      }
      EXPECT_EQ(names.count("wait for parameters"), 1u);
      for (const auto& name : names) EXPECT_EQ(name.find("allreduce"), std::string::npos) << name;
    });
  }
}

// The all-gather writes the parameters in place: like optimizer.step() in one process, a step
// between a forward and its backward must make that backward fail, not compute wrong gradients.
TEST(ZeroBehaviour, AStepBetweenForwardAndBackwardIsCaught) {
  for (int stage : {1, 2}) {
    const auto errors = errors_of(2, [&](int, std::shared_ptr<Group> group) {
      auto net = layers({6, 9, 3});
      ZeroOptions options;
      options.stage = stage;
      ZeroDataParallel zero(net, group, options);
      torch::optim::SGD optimizer(zero.parameters(), torch::optim::SGDOptions(0.1));
      net->forward(torch::randn({4, 6})).sum().backward();
      auto loss = net->forward(torch::randn({4, 6})).pow(2).sum();
      zero.step(optimizer);  // the shards still hold the first backward's gradients
      loss.backward();
    });
    for (const auto& e : errors) {
      EXPECT_NE(e.find("modified by an inplace operation"), std::string::npos) << e;
    }
  }
}

TEST(ZeroBehaviour, StepUpdatesOnlyThroughShardsAndKeepsRanksEqual) {
  run_with_groups(3, [](int rank, std::shared_ptr<Group> group) {
    torch::manual_seed(10 + rank);  // different starts: the constructor makes them rank 0's
    auto net = layers({6, 9, 3});
    ZeroDataParallel zero(net, group);
    torch::optim::SGD optimizer(zero.parameters(), torch::optim::SGDOptions(0.1));
    optimizer.zero_grad();
    net->forward(torch::randn({4, 6})).sum().backward();
    zero.step(optimizer);
    // Every rank ends with the same parameters: compare a checksum through the group.
    double sum = 0;
    for (const auto& p : net->parameters()) sum += p.sum().item<double>();
    std::vector<double> sums(3, 0.0);
    sums[rank] = sum;
    group->allreduce(make_buffer(sums));
    EXPECT_DOUBLE_EQ(sums[0], sums[1]);
    EXPECT_DOUBLE_EQ(sums[0], sums[2]);
  });
}

TEST(ZeroErrors, AnOptimizerOverTheModelsParametersIsNamed) {
  const auto errors = errors_of(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({4, 3});
    ZeroDataParallel zero(net, group);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1));
    zero.step(optimizer);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("is not one of this rank's shards"), std::string::npos) << e;
    EXPECT_NE(e.find("zero.parameters()"), std::string::npos) << e;
  }
}

TEST(ZeroErrors, LbfgsIsRefusedWithTheReason) {
  const auto errors = errors_of(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({4, 3});
    ZeroDataParallel zero(net, group);
    torch::optim::LBFGS optimizer(zero.parameters());
    zero.step(optimizer);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("LBFGS needs whole tensors"), std::string::npos) << e;
  }
}

TEST(ZeroErrors, StageAndHookOptionsAreChecked) {
  const auto errors = errors_of(1, [](int, std::shared_ptr<Group> group) {
    ZeroOptions stage3;
    stage3.stage = 3;
    EXPECT_THROW(ZeroDataParallel(layers({4, 3}), group, stage3), InvalidArgument);
    ZeroOptions hooked;
    hooked.ddp.comm_hook = fp16_compress_hook();
    EXPECT_THROW(ZeroDataParallel(layers({4, 3}), group, hooked), InvalidArgument);
  });
  EXPECT_EQ(errors[0], "");
}

// A data-parallel checkpoint keeps rank 0's optimizer for all: with ZeRO's shard optimizer
// that would hand every rank rank 0's shard state, so it is refused, before any file is made.
TEST(ZeroErrors, ACheckpointOfTheShardOptimizerIsRefused) {
  const std::string path = "/tmp/cohort-zero-ckpt-" + std::to_string(::getpid());
  const auto errors = errors_of(2, [&](int, std::shared_ptr<Group> group) {
    auto net = layers({4, 3});
    ZeroDataParallel zero(net, group);
    torch::optim::Adam optimizer(zero.parameters());
    TrainingState state;
    state.module = net.ptr().get();
    state.optimizer = &optimizer;
    save_checkpoint(path, *group, state);
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("not a parameter of TrainingState::module"), std::string::npos) << e;
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0) << "a file was written";
}

TEST(ZeroErrors, DifferentModelsOnTheRanksAreNamed) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    ZeroDataParallel zero(layers({4, rank == 0 ? 3 : 5}), group);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("'0.weight'"), std::string::npos) << e;
}

}  // namespace
}  // namespace cohort::testing
