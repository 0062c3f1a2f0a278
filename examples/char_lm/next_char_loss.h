// The character model's loss: cross-entropy of each position's logits against the next
// character, as the elastic trainer and the planner's probe take it (the trainer's own adds
// autocast around the forward).
#pragma once

#include <torch/torch.h>

#include "gpt.h"

namespace char_lm {

inline torch::Tensor next_char_loss(
    Gpt& model, const torch::data::Example<>& batch,
    torch::nn::functional::CrossEntropyFuncOptions::reduction_t reduction = torch::kMean) {
  const auto logits = model->forward(batch.data);
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), batch.target.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(reduction));
}

}  // namespace char_lm
