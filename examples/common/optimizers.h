// The examples' --optimizer: one table from a name to the torch::optim optimizer it makes over
// the tensors a Strategy hands out (docs/fashion_mnist.md). A new optimizer is one entry of
// optimizer_makers() in optimizers.cc.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/optim/trust_ratio.h"

namespace cohort_examples {

// What every maker may use; each takes what applies to it.
struct OptimizerSettings {
  double lr = 0.01;
  double momentum = 0.9;      // sgd: momentum; adamw: beta1 stays torch's 0.9
  double weight_decay = 0.0;  // sgd: L2 added to the gradient; adamw, lamb: decoupled decay
  // lars, lamb: the model, whose own parameters decide which tensors are excluded from the
  // trust ratio and weight decay (biases and normalization weights: one dimension), and the
  // strategy's reduction of the trust ratio's norms across shards (Strategy::norm_reduction).
  const torch::nn::Module* module = nullptr;
  cohort::optim::NormReduction norm_reduction;
};

// The tensors to step, under the names of the model's parameters they stand for
// (Strategy::optimizer_parameters()), so that a maker can put biases and normalization weights
// in their own param group.
using NamedParameters = torch::OrderedDict<std::string, torch::Tensor>;
using OptimizerMaker = std::function<std::unique_ptr<torch::optim::Optimizer>(
    const NamedParameters& parameters, const OptimizerSettings& settings)>;

struct OptimizerEntry {
  std::string name;
  std::string description;
  OptimizerMaker make;
};
const std::vector<OptimizerEntry>& optimizer_makers();

// The names, in the table's order (for CLI::IsMember), and one help line listing them.
std::vector<std::string> optimizer_names();
std::string optimizer_help();

// Throws cohort::InvalidArgument naming the known optimizers for an unknown `name`.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::string& name,
                                                        const NamedParameters& parameters,
                                                        const OptimizerSettings& settings);

}  // namespace cohort_examples
