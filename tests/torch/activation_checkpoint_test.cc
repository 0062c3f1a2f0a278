// cohort::checkpoint in one process: gradients with checkpointing equal those without, bit for
// bit (torch::equal) on the CPU, where these operators are deterministic (one thread for each
// test's computation: same kernels, same order, same values); the generators and autocast as in
// the forward; buffers updated once; bad input refused with a clear error.
#include "cohort/torch/activation_checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/amp/autocast.h"

namespace cohort::testing {
namespace activation_checkpoint_test {

// A pre-norm transformer block with dropout in three places (attention weights, both residual
// branches), so that a recomputation drawing other masks gives other gradients.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(double dropout = 0.2) {
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
    qkv = register_module("qkv", torch::nn::Linear(16, 48));
    proj = register_module("proj", torch::nn::Linear(16, 16));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({16})));
    up = register_module("up", torch::nn::Linear(16, 32));
    down = register_module("down", torch::nn::Linear(32, 16));
    drop = register_module("drop", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto parts = qkv(norm1(x)).chunk(3, -1);
    auto scores = torch::matmul(parts[0], parts[1].transpose(1, 2)) / 4.0;
    auto weights = drop(torch::softmax(scores, -1));
    x = x + drop(proj(torch::matmul(weights, parts[2])));
    return x + drop(down(torch::gelu(up(norm2(x)))));
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
  torch::nn::Dropout drop{nullptr};
};
TORCH_MODULE(Block);

struct Gradients {
  torch::Tensor output;
  torch::Tensor input;
  std::vector<torch::Tensor> parameters;
};

// forward(x) -> sum of squares -> backward, from generator seed 7; the input's and every
// parameter's gradient (then cleared).
Gradients gradients_of(torch::nn::Module& model, const std::function<torch::Tensor(torch::Tensor)>& forward,
                       const torch::Tensor& input) {
  torch::manual_seed(7);
  torch::Tensor x = input.clone().requires_grad_(true);
  torch::Tensor y = forward(x);
  y.pow(2).sum().backward();
  Gradients g{y.detach(), x.grad(), {}};
  for (auto& p : model.parameters()) {
    g.parameters.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
    p.mutable_grad() = torch::Tensor();
  }
  return g;
}

void expect_equal(const Gradients& got, const Gradients& want) {
  EXPECT_TRUE(torch::equal(got.output, want.output)) << "outputs differ";
  ASSERT_TRUE(got.input.defined());
  EXPECT_TRUE(torch::equal(got.input, want.input)) << "input gradients differ";
  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  for (size_t i = 0; i < got.parameters.size(); ++i) {
    ASSERT_TRUE(got.parameters[i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_TRUE(torch::equal(got.parameters[i], want.parameters[i])) << "parameter " << i;
  }
}

torch::Tensor sample_input() {
  torch::manual_seed(1);
  return torch::randn({3, 5, 16});
}

TEST(ActivationCheckpoint, TransformerBlockWithDropoutGivesTheSameGradientsBitForBit) {
  torch::manual_seed(0);
  Block block;
  const auto x = sample_input();
  const Gradients plain = gradients_of(*block, [&](torch::Tensor in) { return block(in); }, x);
  const Gradients checkpointed =
      gradients_of(*block, [&](torch::Tensor in) { return cohort::checkpoint(block, in); }, x);
  expect_equal(checkpointed, plain);
}

TEST(ActivationCheckpoint, WithoutTheGeneratorsStateDropoutRecomputesOtherMasks) {
  torch::manual_seed(0);
  Block block;
  const auto x = sample_input();
  const Gradients plain = gradients_of(*block, [&](torch::Tensor in) { return block(in); }, x);
  CheckpointOptions options;
  options.preserve_rng_state = false;
  const Gradients checkpointed = gradients_of(
      *block, [&](torch::Tensor in) { return cohort::checkpoint(block, in, options); }, x);
  EXPECT_TRUE(torch::equal(checkpointed.output, plain.output));
  EXPECT_FALSE(torch::equal(checkpointed.input, plain.input));
}

TEST(ActivationCheckpoint, BackwardLeavesTheGeneratorWhereItWas) {
  torch::manual_seed(0);
  Block block;
  const auto x = sample_input().requires_grad_(true);
  torch::manual_seed(3);
  auto y = cohort::checkpoint(block, x);
  const torch::Tensor before_backward = torch::rand({4});
  torch::manual_seed(3);
  y = cohort::checkpoint(block, x);
  y.sum().backward();
  EXPECT_TRUE(torch::equal(torch::rand({4}), before_backward));
}

TEST(ActivationCheckpoint, SeveralInputsAndOutputsAndACapturedActivation) {
  torch::manual_seed(0);
  torch::nn::Linear mix(8, 8);
  const torch::Tensor a0 = torch::randn({4, 8}), b0 = torch::randn({4, 8});
  const torch::Tensor c0 = torch::randn({4, 8});
  auto run = [&](bool checkpointed) {
    torch::Tensor a = a0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
    torch::Tensor c = c0.clone().requires_grad_(true);
    torch::Tensor captured = c * 2;  // an activation made outside the region, read inside
    CheckpointRegion region = [mix = mix.ptr(), captured](const std::vector<torch::Tensor>& in) {
      torch::Tensor h = torch::tanh(mix->forward(in[0]) + in[1] * captured);
      return std::vector<torch::Tensor>{h, h.sum(1)};
    };
    std::vector<torch::Tensor> out =
        checkpointed ? cohort::checkpoint(region, {a, b}) : region({a, b});
    (out[0].pow(2).sum() + out[1].sum()).backward();
    std::vector<torch::Tensor> grads{a.grad(), b.grad(), c.grad(), mix->weight.grad().clone(),
                                     mix->bias.grad().clone()};
    for (auto& p : mix->parameters()) p.mutable_grad() = torch::Tensor();
    return grads;
  };
  const auto plain = run(false);
  const auto checkpointed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(checkpointed[i].defined()) << "gradient " << i << " missing";
    EXPECT_TRUE(torch::equal(checkpointed[i], plain[i])) << "gradient " << i;
  }
}

TEST(ActivationCheckpoint, ParametersGetGradientsWhenTheInputsNeedNone) {
  torch::manual_seed(0);
  Block block;
  const auto x = sample_input();  // requires no grad
  torch::manual_seed(7);
  block(x).pow(2).sum().backward();
  std::vector<torch::Tensor> plain;
  for (auto& p : block->parameters()) {
    plain.push_back(p.grad().clone());
    p.mutable_grad() = torch::Tensor();
  }
  torch::manual_seed(7);
  cohort::checkpoint(block, x).pow(2).sum().backward();
  const auto parameters = block->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    ASSERT_TRUE(parameters[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(torch::equal(parameters[i].grad(), plain[i])) << "parameter " << i;
  }
}

TEST(ActivationCheckpoint, NestedRegions) {
  torch::manual_seed(0);
  Block first, second;
  torch::nn::Sequential both(first, second);
  const auto x = sample_input();
  auto plain_forward = [&](torch::Tensor in) { return second(first(in)); };
  auto nested = [&](torch::Tensor in) {
    return cohort::checkpoint(
        [first, second](const torch::Tensor& h) mutable {
          return cohort::checkpoint(second, cohort::checkpoint(first, h));
        },
        in);
  };
  expect_equal(gradients_of(*both, nested, x), gradients_of(*both, plain_forward, x));
}

TEST(ActivationCheckpoint, UnderNoGradOrInEvalTheRegionJustRuns) {
  torch::manual_seed(0);
  Block block;
  const auto x = sample_input().requires_grad_(true);
  {
    torch::NoGradGuard no_grad;
    EXPECT_FALSE(cohort::checkpoint(block, x).requires_grad());
  }
  block->eval();
  const torch::Tensor y = cohort::checkpoint(block, x);
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_NE(y.grad_fn()->name(), "cohort::CheckpointBackward");
  block->train();
  EXPECT_EQ(cohort::checkpoint(block, x).grad_fn()->name(), "cohort::CheckpointBackward");
}

// gradients_of with the forward under bfloat16 autocast (backward outside it, as usual).
Gradients gradients_under_autocast(Block& block,
                                   const std::function<torch::Tensor(torch::Tensor)>& forward,
                                   const torch::Tensor& x) {
  return gradients_of(
      *block,
      [&](torch::Tensor in) {
        amp::Autocast autocast(torch::kCPU, torch::kBFloat16);
        return forward(in);
      },
      x);
}

TEST(ActivationCheckpoint, Bfloat16AutocastIsRestoredForTheRecomputation) {
  torch::manual_seed(0);
  Block block(0.0);
  const auto x = sample_input();
  const Gradients plain = gradients_under_autocast(block, [&](torch::Tensor in) { return block(in); }, x);
  const Gradients checkpointed =
      gradients_under_autocast(block, [&](torch::Tensor in) { return cohort::checkpoint(block, in); }, x);
  expect_equal(checkpointed, plain);
  // Recomputing in float32 instead would give other gradients: the comparison can fail.
  const Gradients float32 = gradients_of(*block, [&](torch::Tensor in) { return block(in); }, x);
  EXPECT_FALSE(torch::equal(float32.input, plain.input));
}

TEST(ActivationCheckpoint, BatchNormRunningStatisticsAreUpdatedOnce) {
  torch::manual_seed(0);
  torch::nn::Sequential plain(torch::nn::Linear(6, 6), torch::nn::BatchNorm1d(6));
  torch::nn::Sequential checkpointed(torch::nn::Linear(6, 6), torch::nn::BatchNorm1d(6));
  for (size_t i = 0; i < plain->parameters().size(); ++i) {
    torch::NoGradGuard no_grad;
    checkpointed->parameters()[i].copy_(plain->parameters()[i]);
  }
  const auto x = torch::randn({8, 6});
  plain->forward(x).sum().backward();
  cohort::checkpoint(checkpointed, x).sum().backward();
  const auto want = plain->buffers(), got = checkpointed->buffers();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(torch::equal(got[i], want[i])) << "buffer " << i;
}

// One block used twice under autocast: autocast caches the first region's casts of the weights
// and the second region reads them (an autograd node of the first region's recording run); the
// weights must still get both regions' gradients.
TEST(ActivationCheckpoint, ABlockUsedTwiceUnderAutocastGetsBothGradients) {
  torch::manual_seed(0);
  Block block(0.0);
  const auto x = sample_input();
  const Gradients plain =
      gradients_under_autocast(block, [&](torch::Tensor in) { return block(block(in)); }, x);
  const Gradients checkpointed = gradients_under_autocast(
      block, [&](torch::Tensor in) { return cohort::checkpoint(block, cohort::checkpoint(block, in)); },
      x);
  expect_equal(checkpointed, plain);
}

// ---- bad input

// `bad` throws, saying `message`.
void expect_error(const std::function<void()>& bad, const std::string& message) {
  try {
    bad();
    ADD_FAILURE() << "no error; expected one saying: " << message;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(ActivationCheckpointErrors, ARegionChangingItsInputInPlaceIsRefused) {
  const auto x = torch::randn({4});  // needs no grad, so autograd itself would not notice
  torch::nn::Linear layer(4, 4);
  expect_error(
      [&] {
        cohort::checkpoint(
            [layer = layer.ptr()](const torch::Tensor& in) {
              in.mul_(2);
              return layer->forward(in);
            },
            x);
      },
      "changed its input 0 in place");
}

TEST(ActivationCheckpointErrors, AnInputChangedBetweenForwardAndBackwardIsRefused) {
  auto x = torch::randn({4});
  torch::nn::Linear layer(4, 4);
  torch::Tensor y = cohort::checkpoint([layer = layer.ptr()](const torch::Tensor& in) { return layer->forward(in); }, x);
  x.add_(1);
  expect_error([&] { y.sum().backward(); }, "was changed in place after the region's forward");
  EXPECT_FALSE(layer->weight.grad().defined());
}

TEST(ActivationCheckpointErrors, AnUndefinedOutputIsRefused) {
  torch::nn::Linear layer(4, 4);
  EXPECT_THROW(cohort::checkpoint(
                   [layer = layer.ptr()](const std::vector<torch::Tensor>& in) {
                     return std::vector<torch::Tensor>{layer->forward(in[0]), torch::Tensor()};
                   },
                   {torch::randn({4})}),
               InvalidArgument);
}

TEST(ActivationCheckpointErrors, OutputsSharingMemoryAreRefused) {
  torch::nn::Linear layer(4, 4);
  expect_error(
      [&] {
        cohort::checkpoint(
            [layer = layer.ptr()](const std::vector<torch::Tensor>& in) {
              torch::Tensor h = layer->forward(in[0]);
              return std::vector<torch::Tensor>{h, h.view({-1})};
            },
            {torch::randn({2, 4})});
      },
      "outputs 0 and 1 share memory");
}

TEST(ActivationCheckpointErrors, HigherOrderGradientsAreRefused) {
  torch::nn::Linear layer(4, 4);
  const torch::Tensor x = torch::randn({2, 4}, torch::requires_grad());
  torch::Tensor y = cohort::checkpoint(
      [layer = layer.ptr()](const torch::Tensor& in) { return torch::tanh(layer->forward(in)); },
      x);
  expect_error(
      [&] { torch::autograd::grad({y.sum()}, {x}, {}, /*retain_graph=*/true, /*create_graph=*/true); },
      "higher-order gradients");
}

// A region that is not a function of its inputs: its recomputation returns another shape.
TEST(ActivationCheckpointErrors, ARecomputationThatDiffersFromTheForwardIsRefused) {
  torch::nn::Linear layer(4, 4);
  auto calls = std::make_shared<int>(0);
  torch::Tensor y = cohort::checkpoint(
      [layer = layer.ptr(), calls](const torch::Tensor& in) {
        const int64_t rows = ++*calls == 1 ? 2 : 1;  // the first call is the forward's
        return layer->forward(in).narrow(0, 0, rows);
      },
      torch::randn({2, 4}));
  expect_error([&] { y.sum().backward(); },
               "its recomputation's output 0 is Float [1, 4], its forward's was Float [2, 4]");
  EXPECT_FALSE(layer->weight.grad().defined());
}

TEST(ActivationCheckpointErrors, ASecondBackwardWithoutRetainGraphIsRefused) {
  torch::nn::Linear layer(4, 4);
  torch::Tensor y =
      cohort::checkpoint([layer = layer.ptr()](const torch::Tensor& in) { return layer->forward(in); }, torch::randn({4}));
  y.sum().backward();
  expect_error([&] { y.sum().backward(); }, "retain_graph");
}

}  // namespace activation_checkpoint_test
}  // namespace cohort::testing
