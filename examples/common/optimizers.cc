#include "optimizers.h"

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"

namespace cohort_examples {
namespace {

std::vector<torch::Tensor> tensors_of(const NamedParameters& parameters) {
  std::vector<torch::Tensor> tensors;
  for (const auto& item : parameters) tensors.push_back(item.value());
  return tensors;
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(const NamedParameters& parameters,
                                                  const OptimizerSettings& s) {
  return std::make_unique<torch::optim::SGD>(
      tensors_of(parameters),
      torch::optim::SGDOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay));
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(const NamedParameters& parameters,
                                                    const OptimizerSettings& s) {
  return std::make_unique<torch::optim::AdamW>(
      tensors_of(parameters), torch::optim::AdamWOptions(s.lr).weight_decay(s.weight_decay));
}

// LARS and LAMB adapt every tensor of more than one dimension; biases and normalization
// weights take plain momentum SGD / Adam steps without weight decay (their own param group).
std::unique_ptr<torch::optim::Optimizer> make_lars(const NamedParameters& parameters,
                                                   const OptimizerSettings& s) {
  COHORT_CHECK(s.module != nullptr, "lars needs the model to tell weights from biases");
  const auto options =
      cohort::optim::LarsOptions(s.lr).momentum(s.momentum).weight_decay(s.weight_decay);
  return std::make_unique<cohort::optim::Lars>(
      cohort::optim::adaptation_param_groups(parameters, *s.module, options), options,
      s.norm_reduction);
}

std::unique_ptr<torch::optim::Optimizer> make_lamb(const NamedParameters& parameters,
                                                   const OptimizerSettings& s) {
  COHORT_CHECK(s.module != nullptr, "lamb needs the model to tell weights from biases");
  const auto options = cohort::optim::LambOptions(s.lr).weight_decay(s.weight_decay);
  return std::make_unique<cohort::optim::Lamb>(
      cohort::optim::adaptation_param_groups(parameters, *s.module, options), options,
      s.norm_reduction);
}

}  // namespace

const std::vector<OptimizerEntry>& optimizer_makers() {
  static const std::vector<OptimizerEntry> makers = {
      {"sgd", "SGD with --momentum", make_sgd},
      {"adamw", "AdamW (decoupled --weight-decay)", make_adamw},
      {"lars", "LARS: momentum SGD with a per-layer trust ratio", make_lars},
      {"lamb", "LAMB: AdamW with a per-layer trust ratio", make_lamb},
  };
  return makers;
}

std::vector<std::string> optimizer_names() {
  std::vector<std::string> names;
  for (const auto& entry : optimizer_makers()) names.push_back(entry.name);
  return names;
}

std::string optimizer_help() {
  std::string help = "The optimizer:";
  for (const auto& entry : optimizer_makers()) {
    help += " " + entry.name + " (" + entry.description + ")";
    if (&entry != &optimizer_makers().back()) help += ",";
  }
  return help;
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const NamedParameters& parameters,
                                                        const OptimizerSettings& settings) {
  for (const auto& entry : optimizer_makers()) {
    if (entry.name == name) return entry.make(parameters, settings);
  }
  std::string known;
  for (const auto& n : optimizer_names()) known += (known.empty() ? "" : ", ") + n;
  throw cohort::InvalidArgument("unknown optimizer '" + name + "'; use one of " + known);
}

}  // namespace cohort_examples
