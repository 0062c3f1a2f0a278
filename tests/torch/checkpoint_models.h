// Models for the activation checkpointing tests under DDP, ZeRO and FSDP: transformer blocks
// whose dropout may draw from a generator of the rank's own (ranks that are threads of one
// process share the default generator, so their draws would interleave differently each run).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>

#include "cohort/torch/activation_checkpoint/checkpoint.h"
#include "ddp_harness.h"

namespace cohort::testing {

// Inverted dropout drawing from `generator` (the default one when undefined).
struct GeneratorDropoutImpl : torch::nn::Module {
  GeneratorDropoutImpl(double p, std::optional<at::Generator> generator)
      : p_(p), generator_(std::move(generator)) {}
  torch::Tensor forward(const torch::Tensor& x) {
    if (!is_training() || p_ == 0) return x;
    // Drawn in float32 whatever x's dtype (CPU bernoulli_ has no bfloat16 kernel).
    torch::Tensor keep = torch::empty(x.sizes(), x.options().dtype(torch::kFloat32));
    if (generator_) {
      keep.bernoulli_(1 - p_, *generator_);
    } else {
      keep.bernoulli_(1 - p_);
    }
    return x * keep.to(x.scalar_type()) / (1 - p_);
  }
  double p_;
  std::optional<at::Generator> generator_;
};
TORCH_MODULE(GeneratorDropout);

// Pre-LayerNorm causal self-attention (one head) and a GELU MLP, both residual, dropout on the
// attention weights and both branches. [batch, time, width] -> the same.
struct AttentionBlockImpl : torch::nn::Module {
  AttentionBlockImpl(int64_t width, double dropout, std::optional<at::Generator> generator) {
    norm1 = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    qkv = register_module("qkv", torch::nn::Linear(width, 3 * width));
    proj = register_module("proj", torch::nn::Linear(width, width));
    norm2 = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    up = register_module("up", torch::nn::Linear(width, 4 * width));
    down = register_module("down", torch::nn::Linear(4 * width, width));
    drop = register_module("drop", GeneratorDropout(dropout, std::move(generator)));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto parts = qkv(norm1(x)).chunk(3, -1);
    const int64_t t = x.size(1);
    auto scores = torch::matmul(parts[0], parts[1].transpose(1, 2)) / 4.0;
    auto mask = torch::ones({t, t}, torch::kBool).triu(1);
    auto weights = drop(torch::softmax(scores.masked_fill(mask, -1e9), -1));
    x = x + drop(proj(torch::matmul(weights, parts[2])));
    return x + drop(down(torch::gelu(up(norm2(x)))));
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, up{nullptr}, down{nullptr};
  GeneratorDropout drop{nullptr};
};
TORCH_MODULE(AttentionBlock);

// 10 features -> 4 positions of width 8 -> 3 attention blocks (a Sequential "blocks", the FSDP
// units) -> mean over positions -> 4 classes. checkpoint_in_forward: a rank (rank >= 0, not
// the harness's one-process reference) checkpoints each block with cohort::checkpoint.
struct BlockStack : TestModel {
  BlockStack(double dropout, bool checkpoint_in_forward,
             std::optional<at::Generator> generator = std::nullopt)
      : checkpoint_in_forward_(checkpoint_in_forward) {
    input = register_module("input", torch::nn::Linear(10, 32));
    blocks = register_module("blocks", torch::nn::Sequential());
    for (int i = 0; i < 3; ++i) blocks->push_back(AttentionBlock(8, dropout, generator));
    head = register_module("head", torch::nn::Linear(8, 4));
    if (generator) {  // the rank's own generator instead of the shared default ones
      options_.generators.push_back(*generator);
      options_.preserve_rng_state = false;
    }
  }
  torch::Tensor forward(torch::Tensor x, int, int rank) override {
    // float32 under autocast too: libtorch 1.13's CPU LayerNorm refuses a bfloat16 input with
    // float32 weights, and autocast leaves it to the model.
    torch::Tensor h = input(x).view({x.size(0), 4, 8}).to(torch::kFloat32);
    if (checkpoint_in_forward_ && rank >= 0) {
      for (size_t i = 0; i < blocks->size(); ++i)
        h = cohort::checkpoint(AttentionBlock(blocks->ptr<AttentionBlockImpl>(i)), h, options_);
    } else {
      h = blocks->forward(h);
    }
    return head(h.mean(1));
  }
  bool checkpoint_in_forward_;
  CheckpointOptions options_;
  torch::nn::Linear input{nullptr}, head{nullptr};
  torch::nn::Sequential blocks{nullptr};
};

}  // namespace cohort::testing
