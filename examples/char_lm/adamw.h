// char_lm's optimizer, for the DDP trainer and the elastic one: AdamW with weight decay on the
// matrices and embeddings only.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "gpt.h"
#include "train_options.h"

namespace char_lm {

// Over `parameters` (the model's, or a strategy's shards of them under the model's names).
std::unique_ptr<torch::optim::Optimizer> make_adamw(
    const GptImpl& model, const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    const TrainOptions& options);

}  // namespace char_lm
