// amp::MasterWeights: a bfloat16 (float16) model whose optimizer updates float32 masters.
// The conversion (same tensor objects, buffers too, masters exact), DDP built afterwards
// bucketing 16-bit gradients and matching one process, 50 steps against float32 training and
// against pure bfloat16 training (which loses small updates to rounding), the GradScaler
// skipping an overflow with masters and model untouched, the memory kept between steps, and the
// errors.
#include "cohort/torch/amp/master_weights.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace master_weights_test {

torch::Tensor batch_inputs(int step, int rows) {
  return torch::sin(torch::arange(rows * 32, torch::kFloat32).view({rows, 32}) * 0.29 * (step + 1));
}
torch::Tensor batch_targets(int step, int rows) {
  return torch::cos(torch::arange(rows * 8, torch::kFloat32).view({rows, 8}) * 0.13 * (step + 1));
}

// Weights from a formula, not from torch's global generator (rank threads share it), of
// Linear's default scale (1 / sqrt(fan_in)).
torch::nn::Sequential mlp() {
  auto net =
      torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::Tanh(), torch::nn::Linear(64, 64),
                            torch::nn::Tanh(), torch::nn::Linear(64, 8));
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : net->parameters()) {
    const double scale = 1.0 / std::sqrt(static_cast<double>(p.dim() == 2 ? p.size(1) : 64));
    auto pattern = torch::sin(torch::arange(p.numel(), torch::kFloat32) * 0.731 + ++k);
    p.copy_((pattern * scale).view_as(p));
  }
  return net;
}

// The loss in float32 on the 16-bit model's output; inputs in the model's dtype.
torch::Tensor loss_of(torch::nn::Sequential& net, const torch::Tensor& x, const torch::Tensor& y) {
  const auto dtype = net->parameters()[0].scalar_type();
  return torch::mse_loss(net->forward(x.to(dtype)).to(torch::kFloat32), y);
}

std::vector<torch::Tensor> values(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

torch::Tensor flat(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> pieces;
  for (const auto& t : tensors) pieces.push_back(t.detach().to(torch::kFloat64).reshape(-1));
  return torch::cat(pieces);
}

void load(torch::nn::Module& net, const std::vector<torch::Tensor>& initial) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < initial.size(); ++i) net.parameters()[i].copy_(initial[i]);
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// ---- Construction.

TEST(MasterWeights, ConvertsTheModelInPlaceAndKeepsExactFloat32Masters) {
  auto net = torch::nn::Sequential(torch::nn::Conv2d(1, 4, 3), torch::nn::BatchNorm2d(4),
                                   torch::nn::Flatten(), torch::nn::Linear(144, 4));
  net[3]->as<torch::nn::Linear>()->bias.set_requires_grad(false);  // frozen
  std::vector<const void*> identities;
  for (const auto& p : net->parameters()) identities.push_back(p.unsafeGetTensorImpl());
  auto trainable = net->named_parameters();
  std::vector<torch::Tensor> before;
  for (const auto& item : trainable) {
    if (item.value().requires_grad()) before.push_back(item.value().detach().clone());
  }

  amp::MasterWeights master(net);
  EXPECT_EQ(master.dtype(), torch::kBFloat16);
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].unsafeGetTensorImpl(), identities[i]) << "parameter " << i;
    EXPECT_EQ(params[i].scalar_type(), torch::kBFloat16) << "parameter " << i;
  }
  // Every trainable parameter has a float32 master holding the model's rounded value; the
  // frozen bias none.
  ASSERT_EQ(master.parameters().size(), before.size());
  EXPECT_EQ(master.parameters().size(), params.size() - 1);
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(master.parameters()[i].scalar_type(), torch::kFloat32);
    EXPECT_TRUE(master.parameters()[i].requires_grad());
    EXPECT_TRUE(
        torch::equal(master.parameters()[i], before[i].to(torch::kBFloat16).to(torch::kFloat32)))
        << "master " << i;
  }
  EXPECT_EQ(master.named_parameters().keys().front(), "0.weight");
  // Floating-point buffers follow (libtorch's CPU batch_norm wants one dtype); counts do not.
  auto bn = net[1]->as<torch::nn::BatchNorm2d>();
  EXPECT_EQ(bn->running_mean.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bn->running_var.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(bn->num_batches_tracked.scalar_type(), torch::kInt64);
  auto out = net->forward(torch::randn({2, 1, 8, 8}).to(torch::kBFloat16));  // trains in bf16
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_NE(bn->running_mean.abs().sum().item<float>(), 0.0f);
}

// ---- (a) DDP over a master-weights model against one process on the whole batch.
//
// Tolerance. The ranks and the reference train the same float32 masters and differ only in the
// gradients: each rank's bfloat16 gradient is a bfloat16 matmul over its own rows, rounded, and
// the averages are reduced in bfloat16 (or in float32 with float32_reduction_hook); the
// reference's is one matmul over all rows, rounded once. That is noise of a few units of
// bfloat16's roundoff (2^-8 = 0.39%) in each step's gradient, and the forward's 16-bit weights
// are the rounded masters on both sides. Measured: 0.67% of the distance travelled with either
// reduction. Allowed: 2% (3x that, 5 units of roundoff); a wrong average (a sum, one rank's
// gradient, a master not written back, ranks whose masters disagree) moves them by tens of percent.

constexpr int kRowsPerRank = 4;

std::vector<torch::Tensor> one_process_masters(const std::vector<torch::Tensor>& initial, int world,
                                               int steps) {
  auto net = mlp();
  load(*net, initial);
  amp::MasterWeights master(net);
  torch::optim::SGD sgd(master.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    master.zero_grad();
    const int rows = world * kRowsPerRank;
    loss_of(net, batch_inputs(step, rows), batch_targets(step, rows)).backward();
    master.step(sgd);
  }
  return values(master.parameters());
}

void expect_ddp_matches_one_process(std::shared_ptr<CommHook> hook, torch::ScalarType wire) {
  constexpr int kWorld = 2;
  constexpr int kSteps = 20;
  std::vector<torch::Tensor> initial;
  std::vector<std::vector<torch::Tensor>> trained(kWorld);
  std::vector<std::vector<torch::Tensor>> models(kWorld);
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    auto net = mlp();
    if (rank == 0) {
      initial = values(net->parameters());
    } else {
      torch::NoGradGuard no_grad;  // each rank initializes differently; DDP makes them rank 0's
      for (auto& p : net->parameters()) p.add_(0.05 * rank);
    }
    amp::MasterWeights master(net);  // before DDP: DDP buckets the bfloat16 parameters
    DdpOptions options;
    options.comm_hook = hook;
    DistributedDataParallel ddp(net, group, options);
    // DDP copied rank 0's bfloat16 parameters: the first step takes the masters from them.
    torch::optim::SGD sgd(master.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      master.zero_grad();
      const int rows = kWorld * kRowsPerRank;
      auto x = batch_inputs(step, rows).narrow(0, rank * kRowsPerRank, kRowsPerRank);
      auto y = batch_targets(step, rows).narrow(0, rank * kRowsPerRank, kRowsPerRank);
      loss_of(net, x, y).backward();
      for (const auto& b : ddp.last_iteration_stats().buckets) {
        EXPECT_EQ(b.reduced_dtype, wire);
      }
      EXPECT_TRUE(master.step(sgd));
    }
    trained[rank] = values(master.parameters());
    models[rank] = values(net->parameters());
    // The model is its masters rounded to bfloat16.
    for (size_t i = 0; i < models[rank].size(); ++i) {
      EXPECT_TRUE(torch::equal(models[rank][i], trained[rank][i].to(torch::kBFloat16)));
    }
  });
  const auto start = flat(initial);
  const auto want = flat(one_process_masters(initial, kWorld, kSteps));
  const double travelled = (want - start).norm().item<double>();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(all_equal(trained[rank], trained[0])) << "rank " << rank;
    const double distance = (flat(trained[rank]) - want).norm().item<double>();
    if (rank == 0)
      ::testing::Test::RecordProperty("relative_distance", std::to_string(distance / travelled));
    EXPECT_LE(distance, 0.02 * travelled) << "rank " << rank << ": " << distance
                                          << " from one process, which travelled " << travelled;
  }
}

TEST(MasterWeightsParity, Bf16DdpAtTwoRanksMatchesOneProcess) {
  expect_ddp_matches_one_process(nullptr, torch::kBFloat16);
}
TEST(MasterWeightsParity, Bf16DdpWithFloat32ReductionMatchesOneProcess) {
  expect_ddp_matches_one_process(float32_reduction_hook(), torch::kFloat32);
}

// ---- (b) 50 steps against float32 training, and against pure bfloat16 training.
//
// All three start from the same weights (float32 values that bfloat16 represents exactly) and
// see the same batches. Plain SGD with a small learning rate: its updates (lr x gradient, about
// 1e-4 here) are below half a bfloat16 unit of most weights (2^-9 x |w|, 2e-4 at |w| = 0.1),
// so a bfloat16 model updated in place rounds many of them away, while float32 masters add them
// up. The master-weights run differs from float32 training only through its bfloat16 forward
// and backward (gradients with a few units of 2^-8 of relative noise, not biased): measured
// 0.20% of the distance float32 training travelled. Bound: 2% (10x that). Pure bfloat16 ends
// 28% of that distance away (it lost most updates); the test wants it at least 10x farther
// than the master-weights run.

constexpr int kLongSteps = 50;
constexpr int kLongRows = 8;

std::vector<torch::Tensor> bf16_exact_initial() {
  auto net = mlp();
  std::vector<torch::Tensor> out;
  for (const auto& p : net->parameters()) {
    out.push_back(p.detach().to(torch::kBFloat16).to(torch::kFloat32));
  }
  return out;
}

enum class Precision { kFloat32, kMasterWeights, kPureBf16 };

std::vector<torch::Tensor> train_sgd(const std::vector<torch::Tensor>& initial,
                                     Precision precision) {
  auto net = mlp();
  load(*net, initial);
  std::unique_ptr<amp::MasterWeights> master;
  if (precision == Precision::kMasterWeights) master = std::make_unique<amp::MasterWeights>(net);
  if (precision == Precision::kPureBf16) net->to(torch::kBFloat16);
  const auto params = master ? master->parameters() : net->parameters();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.02));
  for (int step = 0; step < kLongSteps; ++step) {
    sgd.zero_grad();
    if (master) master->zero_grad();
    loss_of(net, batch_inputs(step, kLongRows), batch_targets(step, kLongRows)).backward();
    if (master) {
      master->step(sgd);
    } else {
      sgd.step();
    }
  }
  return values(params);
}

TEST(MasterWeightsParity, FiftyStepsStayCloseToFloat32AndBeatPureBf16) {
  const auto initial = bf16_exact_initial();
  const auto fp32 = flat(train_sgd(initial, Precision::kFloat32));
  const auto mw = flat(train_sgd(initial, Precision::kMasterWeights));
  const auto bf16 = flat(train_sgd(initial, Precision::kPureBf16));
  const double travelled = (fp32 - flat(initial)).norm().item<double>();
  const double mw_distance = (mw - fp32).norm().item<double>();
  const double bf16_distance = (bf16 - fp32).norm().item<double>();
  RecordProperty("master_weights_relative", std::to_string(mw_distance / travelled));
  RecordProperty("pure_bf16_relative", std::to_string(bf16_distance / travelled));
  EXPECT_LE(mw_distance, 0.02 * travelled)
      << "master weights: " << mw_distance << " from float32, which travelled " << travelled;
  EXPECT_GE(bf16_distance, 10 * mw_distance)
      << "pure bf16: " << bf16_distance << ", master weights: " << mw_distance;
}

// ---- (c) With a GradScaler.

amp::GradScalerOptions scaler_options() {
  amp::GradScalerOptions options;
  options.init_scale = 1024;  // a power of two: scaling and unscaling are exact
  options.growth_interval = 100;
  return options;
}

// Three clean steps: with a scaler (through step() or through the pieces, unscale_ and a clip
// that does not bind in between) and without one land on the same masters, bit for bit.
std::vector<torch::Tensor> three_steps(const std::vector<torch::Tensor>& initial, int how) {
  auto net = mlp();
  load(*net, initial);
  amp::MasterWeights master(net);
  torch::optim::SGD sgd(master.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler(scaler_options());
  for (int step = 0; step < 3; ++step) {
    master.zero_grad();
    auto loss = loss_of(net, batch_inputs(step, 6), batch_targets(step, 6));
    if (how == 0) {
      loss.backward();
      EXPECT_TRUE(master.step(sgd));
      continue;
    }
    scaler.scale(loss).backward();
    if (how == 2) {
      master.copy_gradients_to_masters();
      scaler.unscale_(sgd);
      torch::nn::utils::clip_grad_norm_(master.parameters(), 1e6);
    }
    EXPECT_TRUE(master.step(sgd, &scaler));
    scaler.update();
  }
  return values(master.parameters());
}

TEST(MasterWeightsScaler, ScaledStepsEqualUnscaledOnes) {
  const auto initial = bf16_exact_initial();
  const auto plain = three_steps(initial, 0);
  EXPECT_TRUE(all_equal(three_steps(initial, 1), plain)) << "scaler.step inside step()";
  EXPECT_TRUE(all_equal(three_steps(initial, 2), plain)) << "unscale_ and clip in between";
}

TEST(MasterWeightsScaler, AnInfIn16BitGradientsSkipsTheStepAndTouchesNothing) {
  auto net = mlp();
  amp::MasterWeights master(net);
  torch::optim::SGD sgd(master.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler(scaler_options());
  for (int step = 0; step < 3; ++step) {
    master.zero_grad();
    scaler.scale(loss_of(net, batch_inputs(step, 6), batch_targets(step, 6))).backward();
    const bool overflow = step == 1;
    if (overflow) {
      torch::NoGradGuard no_grad;
      net->parameters()[2].grad()[3][5] = std::numeric_limits<float>::infinity();
    }
    const auto masters_before = values(master.parameters());
    const auto model_before = values(net->parameters());
    EXPECT_EQ(master.step(sgd, &scaler), !overflow) << "step " << step;
    EXPECT_EQ(all_equal(values(master.parameters()), masters_before), overflow) << step;
    EXPECT_EQ(all_equal(values(net->parameters()), model_before), overflow) << step;
    for (const auto& m : master.parameters()) EXPECT_FALSE(m.grad().defined());  // released
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), overflow || step == 2 ? 512.0 : 1024.0) << "step " << step;
  }
}

// ---- Memory between steps, counted tensor by tensor (AdamW, no DDP).

size_t nbytes(const torch::Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

TEST(MasterWeightsMemory, AdamWKeepsSixteenBytesPerParameterBetweenSteps) {
  auto net = mlp();
  amp::MasterWeights master(net);
  torch::optim::AdamW adamw(master.parameters(), torch::optim::AdamWOptions(1e-3));
  for (int step = 0; step < 3; ++step) {
    master.zero_grad();
    loss_of(net, batch_inputs(step, 6), batch_targets(step, 6)).backward();
    master.step(adamw);
  }
  size_t count = 0, model = 0, grads = 0, masters = 0, master_grads = 0, moments = 0;
  for (const auto& p : net->parameters()) {
    count += p.numel();
    model += nbytes(p);
    grads += nbytes(p.grad());
  }
  for (const auto& m : master.parameters()) {
    masters += nbytes(m);
    master_grads += nbytes(m.grad());
  }
  for (const auto& item : adamw.state()) {
    const auto& state = static_cast<const torch::optim::AdamWParamState&>(*item.second);
    moments +=
        nbytes(state.exp_avg()) + nbytes(state.exp_avg_sq()) + nbytes(state.max_exp_avg_sq());
  }
  EXPECT_EQ(model, 2 * count);
  EXPECT_EQ(masters, 4 * count);
  EXPECT_EQ(grads, 2 * count);
  EXPECT_EQ(master_grads, 0u);  // released after the step (Note [Master gradients])
  EXPECT_EQ(moments, 8 * count);
  EXPECT_EQ(model + masters + grads + master_grads + moments, 16 * count);
}

// ---- float16 (elementwise only: libtorch 1.13 has no float16 matmul on a CPU).

struct Scale : torch::nn::Module {
  Scale() { w = register_parameter("w", torch::linspace(0.5, 1.5, 16)); }
  torch::Tensor forward(const torch::Tensor& x) { return x * w; }
  torch::Tensor w;
};

TEST(MasterWeights, Float16ModelTrainsItsFloat32MastersWithAScaler) {
  auto net = std::make_shared<Scale>();
  amp::MasterWeights master(net, torch::kFloat16);
  EXPECT_EQ(net->w.scalar_type(), torch::kFloat16);
  torch::optim::SGD sgd(master.parameters(), torch::optim::SGDOptions(0.05));
  amp::GradScaler scaler(scaler_options());
  const auto x = torch::linspace(-1, 1, 16);
  const auto target = x * 0.25;
  double first_loss = 0;
  double last_loss = 0;
  for (int step = 0; step < 30; ++step) {
    master.zero_grad();
    auto loss = (net->forward(x.to(torch::kFloat16)).to(torch::kFloat32) - target).pow(2).sum();
    if (step == 0) first_loss = loss.item<double>();
    last_loss = loss.item<double>();
    scaler.scale(loss).backward();
    EXPECT_EQ(net->w.grad().scalar_type(), torch::kFloat16);
    EXPECT_TRUE(master.step(sgd, &scaler));
    scaler.update();
    EXPECT_TRUE(torch::equal(net->w, master.parameters()[0].to(torch::kFloat16)));
  }
  EXPECT_LT(last_loss, 0.5 * first_loss);
}

// ---- (d) Errors.

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(MasterWeightsErrors, ANon16BitDtypeNamesTheChoices) {
  auto net = mlp();
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kInt32}) {
    const auto what = message_of([&] { amp::MasterWeights{net, dtype}; });
    EXPECT_TRUE(contains(what, "torch::kBFloat16") && contains(what, "torch::kFloat16")) << what;
  }
  EXPECT_EQ(net->parameters()[0].scalar_type(), torch::kFloat32);  // left as it was
}

TEST(MasterWeightsErrors, AModelAlreadyWrappedSaysToBuildMasterWeightsFirst) {
  run_with_groups(2, [&](int, std::shared_ptr<Group> group) {
    auto ddp_net = mlp();
    DistributedDataParallel ddp(ddp_net, group);
    auto what = message_of([&] { amp::MasterWeights{ddp_net}; });
    EXPECT_TRUE(contains(what, "first")) << what;
    EXPECT_EQ(ddp_net->parameters()[0].scalar_type(), torch::kFloat32);

    auto fsdp_net = mlp();
    FullyShardedDataParallel fsdp(fsdp_net, group);
    what = message_of([&] { amp::MasterWeights{fsdp_net}; });
    EXPECT_TRUE(contains(what, "MixedPrecisionPolicy")) << what;
  });
}

TEST(MasterWeightsErrors, AnOptimizerOverTheModelsParametersIsRefused) {
  auto net = mlp();
  amp::MasterWeights master(net);
  torch::optim::SGD wrong(net->parameters(), torch::optim::SGDOptions(0.1));
  master.zero_grad();
  loss_of(net, batch_inputs(0, 4), batch_targets(0, 4)).backward();
  const auto before = values(net->parameters());
  const auto what = message_of([&] { master.step(wrong); });
  EXPECT_TRUE(contains(what, "master_weights.parameters()") && contains(what, "'0.weight'"))
      << what;
  EXPECT_TRUE(all_equal(values(net->parameters()), before));  // nothing stepped
}

}  // namespace master_weights_test
}  // namespace cohort::testing
