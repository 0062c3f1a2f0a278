// DDP on a CUDA model over NCCL groups: W ranks (threads, one GPU each) on slices of each batch
// must match one process training a copy of the model on the whole batch, parameter by
// parameter, after every step. Tolerance: |ddp - reference| <= 1e-6 + 1e-5 |reference| (float32
// sums in another order; for a world of one the average over one rank is the gradient
// itself). The comm hook is set explicitly so that even a world of one reduces its buckets
// through NCCL (DDP skips the default hook's reduction when it is alone). Skipped where there
// is no GPU or libtorch has no CUDA.
#ifdef COHORT_TEST_WITH_TORCH

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "gpu/gpu_support.h"

namespace cohort {
namespace ddp_cuda_test {

using testing::with_nccl_groups;

constexpr int kSteps = 8;
constexpr int kSamplesPerRank = 4;
constexpr double kLearningRate = 0.1;

torch::nn::Sequential make_model() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(10, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 4));
}

// The whole batch of a step, on the CPU, the same on every thread.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int world) {
  torch::manual_seed(1000 + step);
  return {torch::randn({world * kSamplesPerRank, 10}), torch::randn({world * kSamplesPerRank, 4})};
}

// The global RNG is shared by the threads: every model and batch is made here, in order,
// before they start.
void expect_parity(int world) {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int step = 0; step < kSteps; ++step) batches.push_back(batch(step, world));
  std::vector<torch::nn::Sequential> models;
  for (int rank = 0; rank < world; ++rank) models.push_back(make_model());

  // The reference: one process, the whole batch, on GPU 0.
  const torch::Device gpu0(torch::kCUDA, 0);
  auto reference = make_model();
  reference->to(gpu0);
  torch::optim::SGD reference_sgd(reference->parameters(), kLearningRate);
  std::vector<std::vector<torch::Tensor>> expected;  // per step, parameters on the CPU
  for (const auto& [x, y] : batches) {
    reference_sgd.zero_grad();
    torch::mse_loss(reference->forward(x.to(gpu0)), y.to(gpu0)).backward();
    reference_sgd.step();
    expected.emplace_back();
    for (const auto& p : reference->parameters()) expected.back().push_back(p.detach().cpu());
  }

  with_nccl_groups(world, [&](int rank, Group& group) {
    const torch::Device gpu(torch::kCUDA, rank);
    auto model = models[static_cast<size_t>(rank)];
    model->to(gpu);
    DdpOptions options;
    options.comm_hook = allreduce_hook();
    options.bucket_cap_mb = 0.002;  // several buckets
    options.first_bucket_cap_mb = 0.001;
    DistributedDataParallel ddp(model, group.shared_from_this(), options);
    torch::optim::SGD sgd(model->parameters(), kLearningRate);
    for (int step = 0; step < kSteps; ++step) {
      const auto& [x, y] = batches[static_cast<size_t>(step)];
      auto mine = x.narrow(0, rank * kSamplesPerRank, kSamplesPerRank).to(gpu);
      auto target = y.narrow(0, rank * kSamplesPerRank, kSamplesPerRank).to(gpu);
      sgd.zero_grad();
      torch::mse_loss(model->forward(mine), target).backward();
      sgd.step();
      const auto params = model->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        const auto got = params[i].detach().cpu();
        const auto& want = expected[static_cast<size_t>(step)][i];
        ASSERT_TRUE(torch::allclose(got, want, 1e-5, 1e-6))
            << "rank " << rank << " step " << step << " parameter " << i << ": max difference "
            << (got - want).abs().max().item<double>();
      }
    }
  });
}

class NcclDdp : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    COHORT_REQUIRE_GPUS(GetParam());
    if (!torch::cuda::is_available()) GTEST_SKIP() << "this libtorch was built without CUDA";
  }
};

TEST_P(NcclDdp, CudaModelMatchesOneProcess) {
  expect_parity(GetParam());
}

INSTANTIATE_TEST_SUITE_P(World, NcclDdp, ::testing::Values(1, 2),
                         [](const auto& world) { return "world" + std::to_string(world.param); });

}  // namespace ddp_cuda_test
}  // namespace cohort

#endif  // COHORT_TEST_WITH_TORCH
