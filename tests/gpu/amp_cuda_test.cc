// Mixed precision on a CUDA device: float16 autocast with the GradScaler, whose unscale runs
// libtorch's fused CUDA kernel there (the CPU loop elsewhere). The same float32 model trained
// on the GPU and on the CPU with a scaler and an injected overflow must skip the same step, end
// with the same scale, and agree to float16 rounding. Skipped where there is no GPU or libtorch
// has no CUDA.
#ifdef COHORT_TEST_WITH_TORCH

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "cohort/torch/amp/autocast.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "gpu/gpu_support.h"

namespace cohort {
namespace amp_cuda_test {

constexpr int kSteps = 12;
constexpr int kOverflowStep = 5;

struct Trained {
  std::vector<torch::Tensor> parameters;  // on the CPU
  std::vector<bool> stepped;
  double scale = 0;
};

Trained train(torch::Device device, bool autocast_fp16) {
  torch::manual_seed(11);
  auto net =
      torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::Tanh(), torch::nn::Linear(32, 4));
  net->to(device);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05));
  amp::GradScalerOptions options;
  options.init_scale = 4096;
  options.growth_interval = 3;
  amp::GradScaler scaler(options);
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    auto x = torch::sin(torch::arange(8 * 16, torch::kFloat32).view({8, 16}) * 0.1 * (step + 1));
    auto y = torch::cos(torch::arange(8 * 4, torch::kFloat32).view({8, 4}) * 0.2 * (step + 1));
    torch::Tensor loss;
    {
      amp::Autocast autocast(torch::kCUDA, torch::kFloat16, autocast_fp16 && device.is_cuda());
      loss = torch::mse_loss(net->forward(x.to(device)), y.to(device));
    }
    scaler.scale(loss).backward();
    if (step == kOverflowStep) {
      torch::NoGradGuard no_grad;
      net->parameters()[0].grad().view(-1)[3].fill_(std::numeric_limits<float>::infinity());
    }
    scaler.unscale_(optimizer);
    torch::nn::utils::clip_grad_norm_(net->parameters(), 1.0);
    out.stepped.push_back(scaler.step(optimizer));
    scaler.update();
  }
  for (const auto& p : net->parameters()) out.parameters.push_back(p.detach().cpu());
  out.scale = scaler.get_scale();
  return out;
}

class CudaAmp : public ::testing::Test {
 protected:
  void SetUp() override {
    COHORT_REQUIRE_GPUS(1);
    if (!torch::cuda::is_available()) GTEST_SKIP() << "this libtorch was built without CUDA";
  }
};

TEST_F(CudaAmp, ScalerOnTheGpuSkipsAndScalesAsOnTheCpu) {
  const Trained cpu = train(torch::kCPU, false);
  const Trained gpu = train(torch::kCUDA, false);
  EXPECT_EQ(gpu.stepped, cpu.stepped);
  EXPECT_FALSE(gpu.stepped[kOverflowStep]);
  EXPECT_EQ(gpu.scale, cpu.scale);
  for (size_t i = 0; i < cpu.parameters.size(); ++i) {
    EXPECT_TRUE(torch::allclose(gpu.parameters[i], cpu.parameters[i], 1e-4, 1e-5)) << i;
  }
}

TEST_F(CudaAmp, Float16AutocastTrainsCloseToFloat32) {
  const Trained fp32 = train(torch::kCUDA, false);
  const Trained fp16 = train(torch::kCUDA, true);
  EXPECT_EQ(fp16.stepped, fp32.stepped);
  for (size_t i = 0; i < fp32.parameters.size(); ++i) {
    // float16 keeps 11 significant bits: 1e-2 of the parameters' size is tens of roundoffs.
    EXPECT_TRUE(torch::allclose(fp16.parameters[i], fp32.parameters[i], 1e-2, 1e-2)) << i;
  }
}

}  // namespace amp_cuda_test
}  // namespace cohort

#endif  // COHORT_TEST_WITH_TORCH
