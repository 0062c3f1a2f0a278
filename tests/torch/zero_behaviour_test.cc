// ZeroDataParallel beyond the numbers: how the shards tile the parameters, what each stage
// holds (MemoryReport against the formulas of docs/sharding.md), and mistakes that must be
// clear errors.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/custom_function.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "cohort/comm/timeline.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/shard/zero.h"
#include "ddp/bucket_plan.h"
#include "ddp_harness.h"
#include "shard/shard_layout.h"

namespace cohort::testing {
namespace zero_behaviour_test {

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

// The elements of each bucket the reducer makes for `net` (ddp/bucket_plan.h: reverse registration
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

void set_grads_to_none(const std::vector<torch::Tensor>& tensors) {
  for (auto t : tensors) t.mutable_grad() = torch::Tensor();
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

// Note [Gradient memory]: what is allocated, counted exactly (with the padding).
TEST(ZeroMemory, StagesHoldWhatTheFormulasSay) {
  for (int world : {1, 2, 3, 4}) {
    for (int stage : {1, 2}) {
      SCOPED_TRACE("world " + std::to_string(world) + " stage " + std::to_string(stage));
      const auto memory = memory_after_one_step(world, stage);
      int64_t owned_everywhere = 0;
      for (const auto& m : memory) {
        owned_everywhere += m.owned;
        const int64_t padded = sum_of(m.buckets);
        ASSERT_EQ(m.buckets.size(), 2u);
        EXPECT_LT(padded - m.parameters, 2 * world);
        // Whole on every rank, in one flat tensor per bucket (Note [Flat parameters]).
        EXPECT_EQ(m.after_step.parameters, 4u * padded);
        EXPECT_EQ(m.after_step.optimizer_state, 8u * m.owned);  // AdamW's two moments
        EXPECT_LE(m.owned, padded / world);
        if (stage == 1) {
          // One bucket of own gradients for the whole model; the shards' .grad are views of
          // this rank's reduced block in it: nothing more.
          EXPECT_EQ(m.after_step.gradients, 4u * padded);
          EXPECT_EQ(m.after_step.peak_gradients, 4u * padded);
        } else {
          // The buckets are gone once reduced; the reduced blocks stay as the shards' .grad.
          EXPECT_EQ(m.after_step.gradients, 4u * padded / world);
          // At least: the last bucket with every block before it (one backward on one thread:
          // no bucket allocated before the others are reduced can be avoided).
          EXPECT_GE(m.after_step.peak_gradients,
                    4u * (m.buckets.back() + (padded - m.buckets.back()) / world));
          EXPECT_LE(m.after_step.peak_gradients, 4u * (padded + padded / world + m.parameters));
        }
      }
      EXPECT_EQ(owned_everywhere, memory[0].parameters);  // the shards tile the model
    }
  }
}

// Stage 1 keeps this rank's reduced block in its bucket. A shard's .grad still holding it when
// the next backward starts (zeroed in place, as libtorch 1.13's zero_grad() does) moves to
// memory of its own; set to none, it needs none.
TEST(ZeroMemory, StageOneCopiesOnlyTheGradientsThatAreKept) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    run_with_groups(world, [&](int, std::shared_ptr<Group> group) {
      auto net = layers({40, 100, 100, 7});
      ZeroOptions options;
      options.ddp.first_bucket_cap_mb = 0.01;
      options.ddp.bucket_cap_mb = 0.03;
      const size_t bucket_bytes = 4u * sum_of(padded_buckets(*net, options.ddp, world));
      ZeroDataParallel zero(net, group, options);
      torch::optim::SGD optimizer(zero.parameters(), torch::optim::SGDOptions(0.1));
      const size_t owned_bytes = 4u * numel_of(zero.parameters());
      auto iteration = [&] {
        net->forward(torch::randn({5, 40})).pow(2).mean().backward();
        zero.step(optimizer);
      };
      iteration();
      EXPECT_EQ(zero.memory().gradients, bucket_bytes);
      for (auto& shard : zero.parameters()) {
        if (shard.grad().defined()) shard.mutable_grad().zero_();
      }
      iteration();
      EXPECT_EQ(zero.memory().gradients, bucket_bytes + owned_bytes);
      // The copies are made while the gradient about to be copied into its bucket exists too
      // (at most the largest parameter's, 100 x 100).
      const size_t peak = zero.memory().peak_gradients;
      EXPECT_GE(peak, bucket_bytes + owned_bytes);
      EXPECT_LE(peak, bucket_bytes + owned_bytes + 4u * 100 * 100);
      set_grads_to_none(zero.parameters());  // frees the copies
      EXPECT_EQ(zero.memory().gradients, bucket_bytes);
      iteration();
      EXPECT_EQ(zero.memory().gradients, bucket_bytes);
      EXPECT_EQ(zero.memory().peak_gradients, peak);
    });
  }
}

// Identity forward; its backward first runs a barrier on the group. The group runs collectives
// in order, so when backward goes on, every reduce-scatter launched before it has ended.
struct BarrierInBackward : torch::autograd::Function<BarrierInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t group) {
    ctx->saved_data["group"] = group;
    return x.clone();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    reinterpret_cast<Group*>(ctx->saved_data["group"].toInt())->barrier();
    return {grad[0], torch::Tensor()};
  }
};

// Layers of 32 x 32 (+ 32), one bucket each, with a barrier between them in backward.
struct Tower : torch::nn::Module {
  static constexpr int64_t kWidth = 32, kBucket = kWidth * kWidth + kWidth;
  explicit Tower(int n) {
    for (int i = 0; i < n; ++i) {
      fc.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(kWidth, kWidth)));
    }
  }
  torch::Tensor forward(torch::Tensor x, Group& group) {
    for (size_t i = 0; i < fc.size(); ++i) {
      if (i > 0) x = BarrierInBackward::apply(x, reinterpret_cast<int64_t>(&group));
      x = torch::tanh(fc[i]->forward(x));
    }
    return x.pow(2).mean();
  }
  static ZeroOptions options() {
    ZeroOptions options;
    options.stage = 2;
    options.ddp.first_bucket_cap_mb = options.ddp.bucket_cap_mb = 4100.0 / (1 << 20);
    return options;
  }
  std::vector<torch::nn::Linear> fc;
};

// Stage 2 frees a bucket as soon as its reduce-scatter has ended: with every reduce-scatter
// over before the next bucket fills (the barriers), one bucket is held at a time, next to the
// reduced blocks and the gradient being copied in: well below the whole gradient.
TEST(ZeroMemory, StageTwoHoldsOneBucketAtATimeWhenReductionsKeepUp) {
  constexpr int kLayers = 6;
  for (int world : {2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    run_with_groups(world, [&](int, std::shared_ptr<Group> group) {
      auto tower = std::make_shared<Tower>(kLayers);
      ZeroDataParallel zero(tower, group, Tower::options());
      torch::optim::SGD optimizer(zero.parameters(), torch::optim::SGDOptions(0.1));
      tower->forward(torch::randn({4, Tower::kWidth}), *group).backward();
      zero.step(optimizer);
      const int64_t block = Tower::kBucket / world;  // 1056 divides by 2, 3 and 4
      const size_t peak = zero.memory().peak_gradients;
      // The last bucket with every block (the first bucket's gradient may come first: the
      // bias's or the weight's).
      EXPECT_GE(peak, 4u * (Tower::kBucket + kLayers * block));
      EXPECT_LE(peak, 4u * std::max(Tower::kBucket + kLayers * block,
                                    Tower::kBucket + (kLayers - 1) * block +
                                        Tower::kWidth * Tower::kWidth));
      EXPECT_LT(peak, 4u * kLayers * Tower::kBucket);
      EXPECT_EQ(zero.memory().gradients, 4u * kLayers * block);
    });
  }
}

// Under no_sync, stage 2's .grad are whole tensors (as DDP's) until the next synchronized
// backward copies them in: the peak must include them.
TEST(ZeroMemory, StageTwoPeakCountsGradientsAccumulatedUnderNoSync) {
  constexpr int kLayers = 4;
  run_with_groups(2, [&](int, std::shared_ptr<Group> group) {
    auto tower = std::make_shared<Tower>(kLayers);
    ZeroDataParallel zero(tower, group, Tower::options());
    {
      auto no_sync = zero.no_sync();
      tower->forward(torch::randn({4, Tower::kWidth}), *group).backward();
    }
    EXPECT_EQ(zero.memory().gradients, 4u * kLayers * Tower::kBucket);
    tower->forward(torch::randn({4, Tower::kWidth}), *group).backward();
    // The first bucket is allocated while every whole .grad is still there.
    EXPECT_GE(zero.memory().peak_gradients, 4u * (kLayers + 1) * Tower::kBucket);
    EXPECT_EQ(zero.memory().gradients, 4u * kLayers * Tower::kBucket / 2);
  });
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

}  // namespace zero_behaviour_test
}  // namespace cohort::testing
