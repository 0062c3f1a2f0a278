// Ranks that disagree on what would make their replicas diverge, while their collectives stay
// in step, are told so on every rank, naming the first difference: DistributedDataParallel's
// options at construction, and the optimizer (type, param groups, options) at the first step of
// ZeroDataParallel and FullyShardedDataParallel.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace configuration_agreement_test {

void expect_every_rank_names(const std::vector<std::string>& errors,
                             const std::vector<std::string>& words) {
  for (size_t rank = 0; rank < errors.size(); ++rank) {
    ASSERT_FALSE(errors[rank].empty()) << "rank " << rank << " went on";
    for (const auto& word : words) {
      EXPECT_NE(errors[rank].find(word), std::string::npos)
          << "rank " << rank << ", '" << word << "': " << errors[rank];
    }
  }
}

TEST(ConfigurationAgreement, DdpRanksWithDifferentBucketCapsAreTold) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    DdpOptions options;
    options.bucket_cap_mb = rank == 0 ? 25 : 10;
    DistributedDataParallel ddp(layers({10, 8, 4}), group, options);
  });
  expect_every_rank_names(errors, {"DdpOptions", "bucket_cap_mb=25", "bucket_cap_mb=10", "rank 1"});
}

TEST(ConfigurationAgreement, DdpRanksWithDifferentCommHooksAreTold) {
  const auto errors = errors_of(3, [](int rank, std::shared_ptr<Group> group) {
    DdpOptions options;
    if (rank == 2) options.comm_hook = fp16_compress_hook();
    DistributedDataParallel ddp(layers({10, 8, 4}), group, options);
  });
  expect_every_rank_names(errors, {"comm_hook=", "on rank 2"});
}

// Issue 35: the stages differed and the error named DistributedDataParallel's constructor.
TEST(ConfigurationAgreement, ZeroRanksOfDifferentStagesAreTold) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    ZeroOptions options;
    options.stage = rank == 0 ? 1 : 2;
    ZeroDataParallel zero(layers({10, 8, 4}), group, options);
  });
  expect_every_rank_names(errors, {"ZeroDataParallel: ", "ZeroOptions", "stage=1", "stage=2"});
}

TEST(ConfigurationAgreement, ZeroRanksWithDifferentModelsNameZerosConstructor) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    ZeroDataParallel zero(layers({10, rank == 0 ? 8 : 6, 4}), group, ZeroOptions{});
  });
  expect_every_rank_names(errors, {"ZeroDataParallel", "[8, 10]", "[6, 10]"});
  for (const std::string& error : errors) {
    EXPECT_EQ(error.find("DistributedDataParallel"), std::string::npos) << error;
  }
}

// One backward on the model, then `step`: the first step is where the optimizers are compared.
void train_one_step(torch::nn::Sequential net, const std::function<void()>& step) {
  torch::manual_seed(3);
  net->forward(torch::randn({4, 10})).sum().backward();
  step();
}

TEST(ConfigurationAgreement, ZeroRanksSteppingDifferentOptimizersAreTold) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, 8, 4});
    ZeroOptions options;
    options.stage = 2;
    ZeroDataParallel zero(net, group, options);
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    if (rank == 0) {
      optimizer = std::make_unique<torch::optim::AdamW>(zero.parameters());
    } else {
      optimizer = std::make_unique<torch::optim::SGD>(zero.parameters(), 0.1);
    }
    train_one_step(net, [&] { zero.step(*optimizer); });
  });
  expect_every_rank_names(errors, {"ZeroDataParallel::step", "AdamW", "SGD", "rank 1"});
}

// Issue 35: ranks clipping to different max_norm trained apart. The check rides on the norm's
// own allreduce (Note [max_norm rides along]), for the 2-norm (a sum) and the inf-norm (a max).
TEST(ConfigurationAgreement, RanksClippingToDifferentMaxNormsAreTold) {
  for (const double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    const auto errors = errors_of(3, [&](int rank, std::shared_ptr<Group> group) {
      auto net = layers({10, 8, 4});
      ZeroDataParallel zero(net, group, ZeroOptions{});
      torch::manual_seed(3);
      net->forward(torch::randn({4, 10})).sum().backward();
      clip_grad_norm(zero, rank == 2 ? 0.5 : 1.0, norm_type);
    });
    expect_every_rank_names(errors, {"the ranks hold different clip_grad_norm's max_norm"});
  }
  const auto agreeing = errors_of(3, [&](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 8, 4});
    FullyShardedDataParallel fsdp(net, group);
    net->forward(torch::randn({4, 10})).sum().backward();
    clip_grad_norm(fsdp, 0.3);
  });
  for (const auto& error : agreeing) EXPECT_EQ(error, "");
}

// Issue 35: the GradScaler's state was not compared. Under ZeRO and FSDP it rides on the
// overflow flag's allreduce (a max), or on the norm's when clipping (a sum).
TEST(ConfigurationAgreement, RanksWithDifferentGradScalersAreTold) {
  for (const bool clip : {false, true}) {
    const auto errors = errors_of(2, [&](int rank, std::shared_ptr<Group> group) {
      auto net = layers({10, 8, 4});
      FullyShardedDataParallel fsdp(net, group);
      torch::optim::SGD sgd(fsdp.parameters(), 0.1);
      amp::GradScalerOptions options;
      options.init_scale = rank == 0 ? 1024 : 512;
      amp::GradScaler scaler(options);
      scaler.scale(net->forward(torch::randn({4, 10})).sum()).backward();
      if (clip) scaler.clip_grad_norm(fsdp, sgd, 1.0);
      scaler.step(fsdp, sgd);
    });
    expect_every_rank_names(errors, {"GradScaler scale"});
  }
}

TEST(ConfigurationAgreement, FsdpRanksWithDifferentLearningRatesAreTold) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, 8, 4});
    FullyShardedDataParallel fsdp(net, group);
    torch::optim::SGD sgd(fsdp.parameters(), rank == 0 ? 0.1 : 0.2);
    train_one_step(net, [&] { fsdp.step(sgd); });
  });
  expect_every_rank_names(errors, {"FullyShardedDataParallel::step", "lr=0.1", "lr=0.2"});
}

TEST(ConfigurationAgreement, RanksThatAgreeStepOnceChecked) {
  const auto errors = errors_of(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 8, 4});
    FullyShardedDataParallel fsdp(net, group);
    torch::optim::AdamW adamw(fsdp.parameters());
    for (int step = 0; step < 3; ++step) train_one_step(net, [&] { fsdp.step(adamw); });
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

}  // namespace configuration_agreement_test
}  // namespace cohort::testing
