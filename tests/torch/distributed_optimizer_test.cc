// DistributedOptimizer (distributed_optimizer.h): the same training as DistributedDataParallel
// on the same model and data, to the bit, since both run the same reducer with the same
// buckets; plus its constructor's checks, no_sync and fusion buffers.
#include "cohort/torch/ddp/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <optional>

#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"
#include "local_training.h"

namespace cohort::testing {
namespace distributed_optimizer_test {

constexpr int kPerRank = 3;

struct Case {
  int world = 2;
  int steps = 8;
  int micro_batches = 1;  // all but the last under no_sync()
  std::shared_ptr<CommHook> hook;
};

enum class Wrapper { kDdp, kDistributedOptimizer };

// Parameters of every rank after every step.
std::vector<std::vector<std::vector<torch::Tensor>>> train(const Case& c, Wrapper wrapper) {
  torch::set_num_threads(1);
  const auto data = make_step_data(c.steps * c.micro_batches, c.world * kPerRank);
  torch::manual_seed(42);
  auto initial = small_mlp();
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < c.world; ++r) models.push_back(copy_of(initial));
  std::vector<std::vector<std::vector<torch::Tensor>>> states(c.world);
  run_with_groups(c.world, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[rank];
    auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), sgd_momentum());
    std::optional<DistributedDataParallel> ddp;
    std::optional<DistributedOptimizer> optimizer;
    if (wrapper == Wrapper::kDdp) {
      DdpOptions options;
      options.comm_hook = c.hook;
      ddp.emplace(model, group, options);
    } else {
      DistributedOptimizerOptions options;
      options.comm_hook = c.hook;
      optimizer.emplace(sgd, group, options);
    }
    for (int s = 0; s < c.steps; ++s) {
      if (optimizer) {
        optimizer->zero_grad();
      } else {
        sgd->zero_grad();
      }
      for (int m = 0; m < c.micro_batches; ++m) {
        const int batch = s * c.micro_batches + m;
        const bool last = m + 1 == c.micro_batches;
        DistributedDataParallel::NoSync ddp_guard;
        DistributedOptimizer::NoSync optimizer_guard;
        if (!last && ddp) ddp_guard = ddp->no_sync();
        if (!last && optimizer) optimizer_guard = optimizer->no_sync();
        loss_of(model, data.inputs_of(batch, rank, kPerRank),
                data.targets_of(batch, rank, kPerRank))
            .backward();
      }
      if (optimizer) {
        optimizer->step();
      } else {
        sgd->step();
      }
      states[rank].push_back(snapshot(model->parameters()));
    }
  });
  return states;
}

// Both wrap the same reducer with the same buckets, hook and collectives: equal to the bit.
void expect_same_as_ddp(const Case& c) {
  const auto ddp = train(c, Wrapper::kDdp);
  const auto optimizer = train(c, Wrapper::kDistributedOptimizer);
  for (int r = 0; r < c.world; ++r) {
    for (int s = 0; s < c.steps; ++s) {
      EXPECT_TRUE(bitwise_equal(optimizer[r][s], ddp[r][s])) << "rank " << r << " step " << s;
    }
  }
  // And the ranks agree (the test would pass vacuously if neither communicated otherwise).
  for (int r = 1; r < c.world; ++r) {
    EXPECT_TRUE(bitwise_equal(optimizer[r].back(), optimizer[0].back())) << "rank " << r;
  }
}

TEST(DistributedOptimizer, EqualsDdpOnTwoRanks) {
  Case c;
  c.world = 2;
  expect_same_as_ddp(c);
}

TEST(DistributedOptimizer, EqualsDdpOnThreeRanks) {
  Case c;
  c.world = 3;
  expect_same_as_ddp(c);
}

TEST(DistributedOptimizer, EqualsDdpWithFp16Compression) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Case c;
    c.world = world;
    c.hook = fp16_compress_hook();
    expect_same_as_ddp(c);
  }
}

TEST(DistributedOptimizer, EqualsDdpWithNoSyncAccumulation) {
  Case c;
  c.world = 3;
  c.micro_batches = 3;
  expect_same_as_ddp(c);
}

// And matches one process on the whole batch, as DDP does (|diff| <= 1e-6 + 1e-4 |reference|
// after 8 steps: float32 rounding of two summation orders).
TEST(DistributedOptimizer, MatchesOneProcessOnTheWholeBatch) {
  Case c;
  c.world = 3;
  const auto ranks = train(c, Wrapper::kDistributedOptimizer);
  const auto data = make_step_data(c.steps, c.world * kPerRank);
  torch::manual_seed(42);
  auto model = small_mlp();
  torch::optim::SGD sgd(model->parameters(), sgd_momentum());
  for (int s = 0; s < c.steps; ++s) {
    sgd.zero_grad();
    loss_of(model, data.inputs[s], data.targets[s]).backward();
    sgd.step();
    EXPECT_EQ(compare(ranks[1][s], snapshot(model->parameters()), 1e-4, 1e-6), "") << "step " << s;
  }
}

TEST(DistributedOptimizer, BroadcastsRankZerosParameters) {
  torch::manual_seed(8);
  std::vector<torch::nn::Sequential> models = {small_mlp(), small_mlp()};
  const auto rank0 = snapshot(models[0]->parameters());
  EXPECT_FALSE(bitwise_equal(rank0, snapshot(models[1]->parameters())));
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::optim::SGD sgd(models[rank]->parameters(), sgd_momentum());
    DistributedOptimizer optimizer(sgd, group);
  });
  EXPECT_TRUE(bitwise_equal(snapshot(models[1]->parameters()), rank0));
}

TEST(DistributedOptimizer, MismatchedShapesAreNamedOnEveryRank) {
  torch::manual_seed(9);
  std::vector<std::vector<torch::Tensor>> parameters = {
      {torch::randn({16, 10}, torch::requires_grad()), torch::randn({4}, torch::requires_grad())},
      {torch::randn({16, 10}, torch::requires_grad()), torch::randn({5}, torch::requires_grad())}};
  const auto errors = errors_of(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::optim::SGD sgd(parameters[rank], torch::optim::SGDOptions(0.1));
    DistributedOptimizer optimizer(sgd, group);
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("DistributedOptimizer: the ranks wrap different models"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("param_groups[0][1] Float [5]' on rank 1"), std::string::npos) << error;
  }
}

TEST(DistributedOptimizer, StepInsideNoSyncIsRefused) {
  torch::manual_seed(10);
  auto model = small_mlp();
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    torch::optim::SGD sgd(model->parameters(), sgd_momentum());
    DistributedOptimizer optimizer(sgd, group);
    auto guard = optimizer.no_sync();
    EXPECT_THROW(optimizer.step(), InvalidArgument);
    EXPECT_THROW(optimizer.no_sync(), InvalidArgument);  // one guard at a time
  });
}

// A fusion threshold below one layer's gradients puts every parameter in a bucket of its own;
// the statistics show one reduction per bucket, in float16 under compression.
TEST(DistributedOptimizer, FusionThresholdSetsTheBuckets) {
  torch::manual_seed(11);
  std::vector<torch::nn::Sequential> models = {small_mlp(), small_mlp()};
  const auto data = make_step_data(1, 2 * kPerRank);
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::optim::SGD sgd(models[rank]->parameters(), sgd_momentum());
    DistributedOptimizerOptions options;
    options.fusion_threshold_mb = 1e-9;
    options.first_bucket_mb = 1e-9;
    options.comm_hook = fp16_compress_hook();
    DistributedOptimizer optimizer(sgd, group, options);
    EXPECT_EQ(optimizer.bucket_parameter_names().size(), 4u);
    loss_of(models[rank], data.inputs_of(0, rank, kPerRank), data.targets_of(0, rank, kPerRank))
        .backward();
    const auto& stats = optimizer.last_iteration_stats();
    ASSERT_EQ(stats.buckets.size(), 4u);
    for (const auto& bucket : stats.buckets) {
      EXPECT_EQ(bucket.reduced_dtype, torch::kFloat16);
      EXPECT_EQ(bucket.reduced_bytes * 2, bucket.bytes);
    }
  });
  // A threshold above the model's size (the default) fuses it all into one buffer.
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    torch::optim::SGD sgd(models[rank]->parameters(), sgd_momentum());
    DistributedOptimizerOptions options;
    options.first_bucket_mb = 64;
    DistributedOptimizer optimizer(sgd, group, options);
    EXPECT_EQ(optimizer.bucket_parameter_names().size(), 1u);
  });
}

}  // namespace distributed_optimizer_test
}  // namespace cohort::testing
