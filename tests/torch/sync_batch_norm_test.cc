// SyncBatchNorm against one process running torch's own BatchNorm on the whole global batch:
// the layer alone (outputs and every gradient), and models under DDP at W = 2, 3, 4 trained 20
// steps (outputs every step, then parameters and running statistics on every rank), with uneven
// per-rank batches and a rank with none. Tolerance |got - want| <= atol + rtol |want|, float32.
#include "cohort/torch/nn/sync_batch_norm.h"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <numeric>

#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace sync_batch_norm_test {

using cohort::nn::SyncBatchNorm;
using cohort::nn::SyncBatchNormImpl;

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what,
                  double rtol = kRtol, double atol = kAtol) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const torch::Tensor g = got.to(torch::kDouble), w = want.to(torch::kDouble);
  const bool close = ((g - w).abs() <= atol + rtol * w.abs()).all().item<bool>();
  EXPECT_TRUE(close) << what << ": max |diff| " << (g - w).abs().max().item<double>()
                     << ", max |want| " << w.abs().max().item<double>();
}

// Start offsets of each rank's slice of a global batch cut into `sizes`.
std::vector<int64_t> offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> starts(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), starts.begin() + 1);
  return starts;
}

torch::Tensor slice_of(const torch::Tensor& global, const std::vector<int64_t>& sizes, int rank) {
  const std::vector<int64_t> starts = offsets(sizes);
  return global.slice(0, starts[rank], starts[rank + 1]);
}

// ---- the layer alone

// Rank r normalizes its slice of `input`; the reference normalizes all of it with
// BatchNorm{1,2,3}d (through torch::batch_norm). The upstream gradient is the fixed tensor
// `upstream`, so rank r's input gradient must be the reference's slice r (backward sums the
// losses of all ranks) and the ranks' weight and bias gradients must add up to the reference's.
void expect_layer_parity(const torch::Tensor& input, const std::vector<int64_t>& sizes,
                         torch::Dtype dtype = torch::kFloat, double rtol = kRtol,
                         double atol = kAtol) {
  const int world = static_cast<int>(sizes.size());
  const int64_t channels = input.size(1);
  torch::Generator gen = at::detail::createCPUGenerator(7);
  const torch::Tensor upstream = torch::randn(input.sizes(), gen);
  const torch::Tensor weight = torch::rand({channels}, gen) + 0.5;
  const torch::Tensor bias = torch::randn({channels}, gen);

  // Reference, in float32 whatever `dtype` the ranks use.
  torch::Tensor ref_in = input.clone().requires_grad_();
  torch::Tensor ref_w = weight.clone().requires_grad_(), ref_b = bias.clone().requires_grad_();
  torch::Tensor ref_mean = torch::zeros({channels}), ref_var = torch::ones({channels});
  const torch::Tensor ref_out =
      torch::batch_norm(ref_in, ref_w, ref_b, ref_mean, ref_var, true, 0.1, 1e-5, false);
  (ref_out * upstream).sum().backward();

  std::mutex mu;
  torch::Tensor weight_grad_sum = torch::zeros({channels}),
                bias_grad_sum = torch::zeros({channels});
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    SyncBatchNorm layer(torch::nn::BatchNormOptions(channels), group);
    {
      torch::NoGradGuard no_grad;
      layer->weight.copy_(weight);
      layer->bias.copy_(bias);
    }
    torch::Tensor in = slice_of(input, sizes, rank).to(dtype).requires_grad_();
    const torch::Tensor out = layer->forward(in);
    EXPECT_EQ(out.scalar_type(), dtype);
    expect_close(out, slice_of(ref_out, sizes, rank).detach(),
                 "rank " + std::to_string(rank) + " output", rtol, atol);
    (out.to(torch::kFloat) * slice_of(upstream, sizes, rank)).sum().backward();
    expect_close(in.grad(), slice_of(ref_in.grad(), sizes, rank),
                 "rank " + std::to_string(rank) + " input gradient", rtol, atol);
    expect_close(layer->running_mean, ref_mean, "running_mean", rtol, atol);
    expect_close(layer->running_var, ref_var, "running_var", rtol, atol);
    std::lock_guard<std::mutex> lock(mu);
    weight_grad_sum += layer->weight.grad();
    bias_grad_sum += layer->bias.grad();
  });
  expect_close(weight_grad_sum, ref_w.grad(), "weight gradient summed over ranks", rtol, atol);
  expect_close(bias_grad_sum, ref_b.grad(), "bias gradient summed over ranks", rtol, atol);
}

torch::Tensor random_input(std::vector<int64_t> shape, uint64_t seed, double mean = 0.5) {
  torch::Generator gen = at::detail::createCPUGenerator(seed);
  return torch::randn(shape, gen) * 2.0 + mean;
}

TEST(SyncBatchNormLayer, TwoDimensionalInputsAtEveryWorldSize) {
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{4, 4}, {3, 2, 5}, {2, 2, 2, 2}}) {
    SCOPED_TRACE("world " + std::to_string(sizes.size()));
    expect_layer_parity(
        random_input({std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), 3, 5, 4}, 1), sizes);
  }
}

TEST(SyncBatchNormLayer, UnevenBatchesAndAnEmptyRank) {
  expect_layer_parity(random_input({9, 4, 3, 3}, 2), {5, 0, 1, 3});
}

TEST(SyncBatchNormLayer, OneDimensionalInputsWithAndWithoutLength) {
  expect_layer_parity(random_input({10, 6}, 3), {4, 6});
  expect_layer_parity(random_input({7, 3, 5}, 4), {2, 0, 5});
}

TEST(SyncBatchNormLayer, ThreeDimensionalInputs) {
  expect_layer_parity(random_input({6, 2, 3, 4, 2}, 5), {1, 3, 2});
}

// Sums of squares in float32 would lose the variance of inputs whose mean is large against their
// spread (Note [Global statistics]): at a mean of 3000 and a spread of 2, a float32 sum of
// squares (~1e8) rounds away units, as large as the variance (4), so the outputs would be off
// by tens of percent. What remains is float32's resolution of the inputs themselves, 3000 x 2^-24
// ~ 2e-4, divided by the spread: atol 3e-4.
TEST(SyncBatchNormLayer, LargeMeanAgainstTheSpread) {
  expect_layer_parity(random_input({8, 3, 4, 4}, 6, /*mean=*/3000.0), {3, 5}, torch::kFloat, kRtol,
                      3e-4);
}

TEST(SyncBatchNormLayer, BFloat16InputsAgainstTheFloat32Reference) {
  // bfloat16 keeps 8 bits of mantissa: inputs rounded to it differ by up to 2^-8 relative.
  expect_layer_parity(random_input({8, 3, 4, 4}, 8), {5, 3}, torch::kBFloat16, 3e-2, 3e-2);
}

TEST(SyncBatchNormLayer, EvalModeUsesRunningStatisticsWithoutCommunicating) {
  run_with_groups(2, [](int rank, std::shared_ptr<Group> group) {
    SyncBatchNorm layer(torch::nn::BatchNormOptions(3), group);
    {
      torch::NoGradGuard no_grad;
      layer->running_mean.copy_(torch::tensor({1.0, -2.0, 0.5}));
      layer->running_var.copy_(torch::tensor({4.0, 0.25, 1.0}));
    }
    layer->eval();
    const torch::Tensor x = random_input({2 + rank, 3, 4}, 10 + rank);
    const uint64_t before = group->sequence_number();
    const torch::Tensor out = layer->forward(x);
    EXPECT_EQ(group->sequence_number(), before) << "eval mode communicated";
    const torch::Tensor want = (x - layer->running_mean.view({1, 3, 1})) /
                               (layer->running_var.view({1, 3, 1}) + 1e-5).sqrt();
    expect_close(out, want, "eval output");
  });
}

TEST(SyncBatchNormLayer, RunningStatisticsWithCumulativeAverage) {
  // momentum unset: the running statistics are the average of all batches' statistics.
  const torch::Tensor first = random_input({6, 2, 3}, 11), second = random_input({6, 2, 3}, 12);
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    SyncBatchNorm layer(torch::nn::BatchNormOptions(2).momentum(c10::nullopt), group);
    layer->forward(slice_of(first, {2, 2, 2}, rank));
    layer->forward(slice_of(second, {2, 2, 2}, rank));
    const std::vector<int64_t> dims = {0, 2};
    expect_close(layer->running_mean, (first.mean(dims) + second.mean(dims)) / 2, "running_mean");
    expect_close(layer->running_var,
                 (first.var(dims, /*unbiased=*/true) + second.var(dims, true)) / 2, "running_var");
    EXPECT_EQ(layer->num_batches_tracked.item<int64_t>(), 2);
  });
}

void with_one_rank(const std::function<void(std::shared_ptr<Group>)>& body) {
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) { body(std::move(group)); });
}

TEST(SyncBatchNormLayer, BadInputsAreNamed) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    SyncBatchNorm layer(torch::nn::BatchNormOptions(3), group);
    if (rank == 0) {
      try {
        layer->forward(torch::zeros({4, 5}));
        ADD_FAILURE() << "5 channels taken by a layer of 3";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("built for 3"), std::string::npos) << e.what();
      }
      try {
        layer->forward(torch::zeros({3}));
        ADD_FAILURE() << "1-D input taken";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("1-D input"), std::string::npos) << e.what();
      }
    }
    // One value per channel across the whole group: every rank is told.
    layer->forward(torch::zeros({rank == 0 ? 1 : 0, 3}));
  });
  for (const std::string& error : errors)
    EXPECT_NE(error.find("more than 1 value per channel"), std::string::npos) << error;
  EXPECT_THROW(SyncBatchNorm(torch::nn::BatchNormOptions(3), nullptr), InvalidArgument);
  with_one_rank([](std::shared_ptr<Group> group) {
    EXPECT_THROW(SyncBatchNorm(torch::nn::BatchNormOptions(0), group), InvalidArgument);
    EXPECT_THROW(cohort::nn::convert_sync_batchnorm(nullptr, group), InvalidArgument);
    EXPECT_THROW(cohort::nn::convert_sync_batchnorm(torch::nn::BatchNorm1d(2).ptr(), nullptr),
                 InvalidArgument);
  });
}

// ---- convert_sync_batchnorm

std::vector<std::string> state_names(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& p : module.named_parameters()) names.push_back(p.key());
  for (const auto& b : module.named_buffers()) names.push_back(b.key());
  return names;
}

// BatchNorms in a Sequential, one nested a level down, a ModuleList and a ModuleDict.
struct Containers : torch::nn::Module {
  Containers() {
    seq = register_module(
        "seq", torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4)));
    inner = register_module("inner", std::make_shared<torch::nn::Module>());
    inner->register_module(
        "block",
        torch::nn::Sequential(torch::nn::Conv3d(1, 2, 2),
                              torch::nn::BatchNorm3d(torch::nn::BatchNormOptions(2).eps(1e-3))));
    list = register_module("list", torch::nn::ModuleList(torch::nn::BatchNorm1d(4)));
    dict = register_module(
        "dict",
        torch::nn::ModuleDict(torch::OrderedDict<std::string, std::shared_ptr<Module>>{
            {"norm", torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(5).affine(false)).ptr()}}));
  }
  torch::nn::Sequential seq{nullptr};
  std::shared_ptr<torch::nn::Module> inner;
  torch::nn::ModuleList list{nullptr};
  torch::nn::ModuleDict dict{nullptr};
};

TEST(ConvertSyncBatchNorm, ReplacesEveryBatchNormKeepingTensorsOptionsAndMode) {
  with_one_rank([](std::shared_ptr<Group> group) {
    auto model = std::make_shared<Containers>();
    model->eval();
    const std::vector<std::string> names_before = state_names(*model);
    const torch::Tensor weight = model->seq[1]->as<torch::nn::BatchNorm1d>()->weight;
    const auto converted = cohort::nn::convert_sync_batchnorm(model, group);
    EXPECT_EQ(converted, model);
    EXPECT_EQ(state_names(*model), names_before);
    int found = 0;
    for (const auto& m : model->modules()) {
      EXPECT_EQ(std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(m), nullptr);
      EXPECT_EQ(std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(m), nullptr);
      EXPECT_EQ(std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(m), nullptr);
      if (auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(m)) {
        ++found;
        EXPECT_FALSE(sync->is_training());
      }
    }
    EXPECT_EQ(found, 4);
    // The Sequential calls the new layer: the same tensor objects, so optimizers keep working.
    auto first = model->seq[1]->as<SyncBatchNormImpl>();
    ASSERT_NE(first, nullptr);
    EXPECT_TRUE(first->weight.is_same(weight));
    auto* block = model->inner->named_children()["block"]->as<torch::nn::Sequential>();
    ASSERT_NE(block, nullptr);
    EXPECT_DOUBLE_EQ(block->ptr(1)->as<SyncBatchNormImpl>()->options().eps(), 1e-3);
    EXPECT_NE(model->list[0]->as<SyncBatchNormImpl>(), nullptr);
    EXPECT_FALSE(model->dict["norm"]->as<SyncBatchNormImpl>()->options().affine());
    // The forward goes through the replacement (eval: running statistics, a known result).
    const torch::Tensor out = model->seq->forward(torch::randn({2, 3}));
    EXPECT_EQ(out.size(1), 4);
  });
}

TEST(ConvertSyncBatchNorm, ABatchNormItselfComesBackConverted) {
  with_one_rank([](std::shared_ptr<Group> group) {
    torch::nn::BatchNorm2d bn(7);
    auto converted = cohort::nn::convert_sync_batchnorm(bn.ptr(), group);
    auto sync = std::dynamic_pointer_cast<SyncBatchNormImpl>(converted);
    ASSERT_NE(sync, nullptr);
    EXPECT_TRUE(sync->running_var.is_same(bn->running_var));
    EXPECT_EQ(sync->options().num_features(), 7);
  });
}

// A member holder would keep calling the BatchNorm: refused, naming it, with nothing changed.
struct MemberHeld : torch::nn::Module {
  MemberHeld() {
    block = register_module("block", torch::nn::Sequential(torch::nn::BatchNorm1d(3)));
    bn = register_module("bn", torch::nn::BatchNorm1d(3));
  }
  torch::Tensor forward(torch::Tensor x) { return bn(block->forward(x)); }
  torch::nn::Sequential block{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

TEST(ConvertSyncBatchNorm, RefusesABatchNormHeldByAMember) {
  with_one_rank([](std::shared_ptr<Group> group) {
    auto model = std::make_shared<MemberHeld>();
    try {
      cohort::nn::convert_sync_batchnorm(model, group);
      ADD_FAILURE() << "a member-held BatchNorm was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'bn'"), std::string::npos) << e.what();
    }
    EXPECT_NE(model->block[0]->as<torch::nn::BatchNorm1d>(), nullptr) << "changed anyway";
  });
}

// ---- under DDP: models trained 20 steps against one process on the whole global batch

struct TrainCase {
  std::function<torch::nn::Sequential()> make_model;
  std::vector<int64_t> input_shape;  // of one sample
  std::vector<int64_t> sizes;        // each rank's samples per step
  bool broadcast_buffers = false;
  int steps = 20;
};

torch::nn::Sequential conv2d_model() {
  return torch::nn::Sequential(torch::nn::Conv2d(2, 4, 3), torch::nn::BatchNorm2d(4),
                               torch::nn::ReLU(), torch::nn::Flatten(), torch::nn::Linear(64, 3));
}
torch::nn::Sequential linear1d_model() {
  return torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::BatchNorm1d(8),
                               torch::nn::ReLU(), torch::nn::Linear(8, 3));
}
torch::nn::Sequential conv3d_model() {
  return torch::nn::Sequential(torch::nn::Conv3d(1, 3, 2), torch::nn::BatchNorm3d(3),
                               torch::nn::ReLU(), torch::nn::Flatten(), torch::nn::Linear(81, 3));
}

// The loss of a slice: its squared error summed, scaled so that DDP's average over the ranks
// is the mean over the global batch, whatever each rank's share.
torch::Tensor scaled_loss(const torch::Tensor& out, const torch::Tensor& target, int64_t global,
                          int world) {
  return (out - target).square().sum() * (double(world) / double(global));
}

void expect_training_parity(const TrainCase& c) {
  const int world = static_cast<int>(c.sizes.size());
  const int64_t global = std::accumulate(c.sizes.begin(), c.sizes.end(), int64_t{0});
  torch::manual_seed(3);  // main thread only: the initial weights
  torch::nn::Sequential reference = c.make_model();
  std::vector<torch::nn::Sequential> copies;
  for (int r = 0; r < world; ++r)
    copies.push_back(std::dynamic_pointer_cast<torch::nn::SequentialImpl>(reference->clone()));
  torch::Generator gen = at::detail::createCPUGenerator(17);
  std::vector<int64_t> shape = {global};
  shape.insert(shape.end(), c.input_shape.begin(), c.input_shape.end());
  std::vector<torch::Tensor> inputs, targets, ref_outputs;
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < c.steps; ++s) {
    inputs.push_back(torch::randn(shape, gen) + 1.0);
    targets.push_back(torch::randn({global, 3}, gen));
    ref_opt.zero_grad();
    const torch::Tensor out = reference->forward(inputs.back());
    ref_outputs.push_back(out.detach());
    ((out - targets.back()).square().sum() / double(global)).backward();
    ref_opt.step();
  }
  run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
    auto model = cohort::nn::convert_sync_batchnorm(copies[rank].ptr(), group);
    DdpOptions options;
    options.broadcast_buffers = c.broadcast_buffers;
    DistributedDataParallel ddp(model, group, options);
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int s = 0; s < c.steps; ++s) {
      opt.zero_grad();
      const torch::Tensor out = copies[rank]->forward(slice_of(inputs[s], c.sizes, rank));
      expect_close(out.detach(), slice_of(ref_outputs[s], c.sizes, rank),
                   "rank " + std::to_string(rank) + " output of step " + std::to_string(s));
      scaled_loss(out, slice_of(targets[s], c.sizes, rank), global, world).backward();
      opt.step();
    }
    for (const auto& p : reference->named_parameters())
      expect_close(model->named_parameters()[p.key()], p.value(),
                   "rank " + std::to_string(rank) + " parameter " + p.key());
    for (const auto& b : reference->named_buffers())
      expect_close(model->named_buffers()[b.key()], b.value(),
                   "rank " + std::to_string(rank) + " buffer " + b.key());
  });
}

TEST(SyncBatchNormDdp, Conv2dAtWorldSizesTwoThreeFour) {
  for (const std::vector<int64_t>& sizes :
       std::vector<std::vector<int64_t>>{{3, 3}, {2, 2, 2}, {2, 2, 2, 2}}) {
    SCOPED_TRACE("world " + std::to_string(sizes.size()));
    expect_training_parity({conv2d_model, {2, 6, 6}, sizes});
  }
}

TEST(SyncBatchNormDdp, UnevenBatchesAndAnEmptyRank) {
  expect_training_parity({conv2d_model, {2, 6, 6}, {4, 1, 0, 3}});
}

TEST(SyncBatchNormDdp, OneAndThreeDimensionalModels) {
  expect_training_parity({linear1d_model, {6}, {3, 5, 2}});
  expect_training_parity({conv3d_model, {1, 4, 4, 4}, {2, 3}});
}

// DDP's buffer broadcast copies rank 0's running statistics, which SyncBatchNorm already made
// equal on every rank: on or off, the result is the same.
TEST(SyncBatchNormDdp, BufferBroadcastChangesNothing) {
  expect_training_parity({conv2d_model, {2, 6, 6}, {3, 2}, /*broadcast_buffers=*/true});
}

}  // namespace sync_batch_norm_test
}  // namespace cohort::testing
