#include "adamw.h"

#include <vector>

namespace char_lm {
namespace {

// beta2 = 0.95 rather than torch's 0.999: the second moment follows the gradients' scale
// faster, which keeps the early steps of transformer training stable (GPT-3's setting).
torch::optim::AdamWOptions adamw_options(double lr, double weight_decay) {
  return torch::optim::AdamWOptions(lr).betas({0.9, 0.95}).weight_decay(weight_decay);
}

}  // namespace

// Weight decay on the matrices and embeddings only: decaying biases and LayerNorm gains towards
// zero only fights the normalization. Decided by the shape of the model's parameter, since a
// strategy may hand out flat shards of it.
std::unique_ptr<torch::optim::Optimizer> make_adamw(
    const GptImpl& model, const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    const TrainOptions& options) {
  const auto model_parameters = model.named_parameters();
  std::vector<torch::Tensor> decayed, not_decayed;
  for (const auto& item : parameters) {
    const bool matrix = model_parameters[item.key()].dim() >= 2;
    (matrix ? decayed : not_decayed).push_back(item.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, std::make_unique<torch::optim::AdamWOptions>(
                                   adamw_options(options.lr, options.weight_decay)));
  groups.emplace_back(not_decayed,
                      std::make_unique<torch::optim::AdamWOptions>(adamw_options(options.lr, 0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), adamw_options(options.lr, 0.0));
}

}  // namespace char_lm
