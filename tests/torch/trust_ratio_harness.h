// Shared by lars_test.cc and lamb_test.cc: trains one small model with a trust-ratio optimizer
// in one process, under DistributedDataParallel, ZeroDataParallel or FullyShardedDataParallel
// on thread ranks, from the same initial weights and data, so that the runs can be compared.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/core/error.h"
#include "cohort/torch/optim/trust_ratio.h"
#include "cohort/torch/strategy/strategy_kind.h"

namespace cohort::testing {

// TrainCase::strategy of one process training alone: no wrapper, world 1.
inline constexpr std::optional<StrategyKind> kOneProcess = std::nullopt;

// Builds the optimizer over `named` (the tensors it steps, by parameter name: the module's
// parameters, or the wrapper's shards) of `module`, with `reduction`.
using MakeOptimizer = std::function<std::unique_ptr<optim::TrustRatioOptimizer>(
    const torch::OrderedDict<std::string, torch::Tensor>& named, const torch::nn::Module& module,
    optim::NormReduction reduction)>;

struct TrainCase {
  // How the ranks wrap the model: kDdp, kZero1, kZero2, kFullShard or kHybridShard; kOneProcess
  // (nullopt) for one process alone.
  std::optional<StrategyKind> strategy = kOneProcess;
  int world = 1;
  int steps = 8;
  int global_batch = 12;             // split evenly over the ranks
  bool reduce_norms = true;          // pass shard_norm_reduction() to the optimizer
  std::vector<std::string> node_of;  // kHybridShard: each rank's node
  MakeOptimizer make_optimizer;
  // Checkpoints (DDP: checkpoint.h's file; ZeRO/FSDP: a sharded checkpoint directory). With
  // load_from, the run loads it first and trains steps [first_step, steps); with save_to, it
  // saves after its last step.
  int first_step = 0;
  std::string load_from;
  std::string save_to;
};

// 10 -> 24 -> tanh -> 24 -> tanh -> 4 (names "0.weight", "0.bias", "2.weight", ...), the same
// initial weights every call.
torch::nn::Sequential trust_ratio_model();
// Global batch `step` of a run: inputs [batch, 10] and targets [batch, 4], the same every call.
std::pair<torch::Tensor, torch::Tensor> trust_ratio_batch(int step, int batch);
// The mean squared error of `model` on these inputs.
torch::Tensor trust_ratio_loss(torch::nn::Sequential& model, const torch::Tensor& inputs,
                               const torch::Tensor& targets);

// One rank of the case (group: null for kOneProcess); returns its parameters, whole, after
// the last step.
std::vector<torch::Tensor> train_rank(const TrainCase& c, int rank, std::shared_ptr<Group> group);

// Trains the case and returns rank 0's parameters (whole) after the last step. Every rank's
// must equal rank 0's (checked).
std::vector<torch::Tensor> train_case(const TrainCase& c);

// Trains `c` (at world size 2) without the norm reduction: every rank must be refused, the error
// naming shard_norm_reduction.
void expect_refused_without_reduction(TrainCase c);

// |got - want| <= atol + rtol * |want| elementwise, naming the tensor and the largest gap.
void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  double rtol, double atol);

// ---- one process (lars_test.cc, lamb_test.cc)

// A param group of the test model by parameter names, with its options.
template <typename Options>
struct NamedGroup {
  std::vector<std::string> names;
  Options options;
};

template <typename Options>
std::vector<torch::optim::OptimizerParamGroup> param_groups(
    torch::nn::Module& model, const std::vector<NamedGroup<Options>>& groups) {
  auto named = model.named_parameters();
  std::vector<torch::optim::OptimizerParamGroup> out;
  for (const auto& group : groups) {
    std::vector<torch::Tensor> params;
    for (const auto& name : group.names) params.push_back(named[name]);
    out.emplace_back(params, std::make_unique<Options>(group.options));
  }
  return out;
}

// One process on the whole batch, steps [first, last): `step` updates `model` after each
// backward.
void train(torch::nn::Sequential& model, int first, int last, const std::function<void()>& step);

// The model's parameters, copied, as float32.
std::vector<torch::Tensor> parameters_of(torch::nn::Module& model);

// Constructing Optimizer with `options` throws InvalidArgument containing `words`.
template <typename Optimizer, typename Options>
void expect_refused(const Options& options, const std::string& words) {
  auto model = trust_ratio_model();
  try {
    Optimizer optimizer(model->parameters(), options);
    ADD_FAILURE() << "no error; expected one about " << words;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// torch::save / torch::load of the optimizer over `groups`: a restored optimizer continues
// as the original, bit for bit.
template <typename Optimizer, typename Options>
void expect_saved_state_continues(const std::vector<NamedGroup<Options>>& groups) {
  auto model = trust_ratio_model();
  Optimizer optimizer(param_groups(*model, groups));
  train(model, 0, 3, [&] { optimizer.step(); });
  std::stringstream saved;
  torch::save(optimizer, saved);
  auto restored = trust_ratio_model();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < model->parameters().size(); ++i) {
      restored->parameters()[i].copy_(model->parameters()[i]);
    }
  }
  Optimizer loaded(param_groups(*restored, groups));
  torch::load(loaded, saved);
  train(model, 3, 6, [&] { optimizer.step(); });
  train(restored, 3, 6, [&] { loaded.step(); });
  const auto got = parameters_of(*restored), want = parameters_of(*model);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(torch::equal(got[i], want[i])) << i;
}

}  // namespace cohort::testing
