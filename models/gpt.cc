#include "gpt.h"

#include <cmath>
#include <limits>
#include <string>

namespace char_lm {

namespace {

// GPT-2's initialization: N(0, 0.02) weights, zero biases.
constexpr double kInitStd = 0.02;

torch::nn::Linear linear(int64_t in, int64_t out, bool bias = true) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
}

void check_config(const GptConfig& c) {
  TORCH_CHECK(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.heads > 0 && c.width > 0,
              "GptConfig: vocab, context, layers, heads and width must be positive");
  TORCH_CHECK(c.width % c.heads == 0, "GptConfig: width ", c.width, " is not a multiple of heads ",
              c.heads);
  TORCH_CHECK(c.dropout >= 0 && c.dropout < 1, "GptConfig: dropout ", c.dropout,
              " is outside [0, 1)");
}

// [batch, time, width] -> [batch, heads, time, width / heads]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// True above the diagonal: the later positions a position must not see. Built per call rather
// than kept as a registered buffer, which DDP would broadcast and checkpoints would save.
torch::Tensor future_mask(int64_t time, const torch::Device& device) {
  return torch::ones({time, time}, torch::TensorOptions().dtype(torch::kBool).device(device))
      .triu(1);
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c) : heads_(c.heads) {
  query_ = register_module("query", linear(c.width, c.width));
  key_ = register_module("key", linear(c.width, c.width));
  value_ = register_module("value", linear(c.width, c.width));
  projection_ = register_module("projection", linear(c.width, c.width));
  attention_dropout_ = register_module("attention_dropout", torch::nn::Dropout(c.dropout));
  residual_dropout_ = register_module("residual_dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const torch::Tensor q = split_heads(query_->forward(x), heads_);
  const torch::Tensor k = split_heads(key_->forward(x), heads_);
  const torch::Tensor v = split_heads(value_->forward(x), heads_);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * scale;
  scores = scores.masked_fill(future_mask(x.size(1), x.device()),
                              -std::numeric_limits<float>::infinity());
  const torch::Tensor weights = attention_dropout_->forward(torch::softmax(scores, -1));
  const torch::Tensor mixed = torch::matmul(weights, v).transpose(1, 2).reshape(x.sizes());
  return residual_dropout_->forward(projection_->forward(mixed));
}

TransformerBlockImpl::TransformerBlockImpl(const GptConfig& c) {
  attention_norm_ = register_module("attention_norm", layer_norm(c.width));
  attention_ = register_module("attention", CausalSelfAttention(c));
  mlp_norm_ = register_module("mlp_norm", layer_norm(c.width));
  expand_ = register_module("expand", linear(c.width, 4 * c.width));
  contract_ = register_module("contract", linear(4 * c.width, c.width));
  mlp_dropout_ = register_module("mlp_dropout", torch::nn::Dropout(c.dropout));
}

torch::Tensor TransformerBlockImpl::forward(torch::Tensor x) {
  x = x + attention_->forward(attention_norm_->forward(x));
  const torch::Tensor hidden = torch::gelu(expand_->forward(mlp_norm_->forward(x)));
  return x + mlp_dropout_->forward(contract_->forward(hidden));
}

GptImpl::GptImpl(const GptConfig& c) : config_(c) {
  check_config(c);
  token_embedding_ = register_module("token_embedding", torch::nn::Embedding(c.vocab, c.width));
  position_embedding_ =
      register_module("position_embedding", torch::nn::Embedding(c.context, c.width));
  embedding_dropout_ = register_module("embedding_dropout", torch::nn::Dropout(c.dropout));
  blocks_ = register_module("blocks", torch::nn::Sequential());
  for (int64_t i = 0; i < c.layers; ++i) blocks_->push_back(TransformerBlock(c));
  final_norm_ = register_module("final_norm", layer_norm(c.width));
  // Not tied to the token embedding: a weight shared by two modules would belong to two
  // sharding units.
  head_ = register_module("head", linear(c.width, c.vocab, /*bias=*/false));
  initialize_weights();
}

// GPT-2's scheme: N(0, 0.02) for every weight matrix and embedding, zero biases, LayerNorm at
// identity; the projections that write into the residual stream are scaled down by
// sqrt(2 * layers) so the stream's variance does not grow with depth.
void GptImpl::initialize_weights() {
  torch::NoGradGuard no_grad;
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(config_.layers));
  for (const auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (p.dim() < 2) continue;  // biases and LayerNorm parameters keep their defaults
    const bool into_residual = name.find("projection.weight") != std::string::npos ||
                               name.find("contract.weight") != std::string::npos;
    p.normal_(0.0, into_residual ? residual_std : kInitStd);
  }
  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* l = module->as<torch::nn::Linear>(); l && l->bias.defined()) l->bias.zero_();
  }
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const int64_t time = tokens.size(1);
  TORCH_CHECK(time <= config_.context, "Gpt::forward: a sequence of ", time,
              " tokens is longer than the model's context of ", config_.context);
  const torch::Tensor positions =
      torch::arange(time, torch::TensorOptions().dtype(torch::kInt64).device(tokens.device()));
  torch::Tensor x = token_embedding_->forward(tokens) + position_embedding_->forward(positions);
  x = embedding_dropout_->forward(x);
  x = blocks_->forward(x);
  return head_->forward(final_norm_->forward(x));
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const torch::Tensor& p : module.parameters()) total += p.numel();
  return total;
}

}  // namespace char_lm
