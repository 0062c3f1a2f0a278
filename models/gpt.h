// A GPT-style decoder-only transformer (Radford et al. 2018/2019): token and learned position
// embeddings, `layers` pre-LayerNorm blocks of causal multi-head self-attention and a GELU MLP,
// a final LayerNorm and a linear head giving the next token's logits at every position.
//
// Written with plain torch ops so that it runs on libtorch 1.13 (no fused attention there) and
// so that every parameter is an ordinary nn::Linear, nn::Embedding or nn::LayerNorm one. The
// blocks sit in an nn::Sequential named `blocks`: the units a sharded strategy (FSDP's
// auto-wrap of Sequential children) gathers one at a time, and the regions
// cohort::checkpoint_modules can checkpoint (it redirects a Sequential's calls of its children;
// a ModuleList's children are called by their type, past any hook). Nothing here knows about the
// char_lm example (whose namespace it keeps), so benchmarks build it at any size (12 layers of width 768 is 85 M
// parameters with a byte vocabulary and context 1024).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace char_lm {

struct GptConfig {
  int64_t vocab = 256;   // tokens
  int64_t context = 64;  // longest sequence forward() takes (the position embeddings)
  int64_t layers = 4;
  int64_t heads = 4;  // must divide width
  int64_t width = 128;
  double dropout = 0.1;  // on attention weights, residual branches and embeddings
};

// Causal multi-head self-attention: a position attends to itself and the positions before it.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [batch, time, width] -> the same

 private:
  int64_t heads_;
  torch::nn::Linear query_{nullptr}, key_{nullptr}, value_{nullptr}, projection_{nullptr};
  torch::nn::Dropout attention_dropout_{nullptr}, residual_dropout_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// x + attention(norm(x)), then x + mlp(norm(x)).
class TransformerBlockImpl : public torch::nn::Module {
 public:
  explicit TransformerBlockImpl(const GptConfig& config);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::LayerNorm attention_norm_{nullptr}, mlp_norm_{nullptr};
  CausalSelfAttention attention_{nullptr};
  torch::nn::Linear expand_{nullptr}, contract_{nullptr};
  torch::nn::Dropout mlp_dropout_{nullptr};
};
TORCH_MODULE(TransformerBlock);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptConfig& config);
  // tokens: int64 [batch, time] with time <= config.context; returns float logits
  // [batch, time, vocab], position t predicting token t + 1.
  torch::Tensor forward(const torch::Tensor& tokens);
  const GptConfig& config() const { return config_; }

 private:
  void initialize_weights();

  GptConfig config_;
  torch::nn::Embedding token_embedding_{nullptr}, position_embedding_{nullptr};
  torch::nn::Dropout embedding_dropout_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm final_norm_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(Gpt);

// Elements of every parameter of `module`.
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace char_lm
