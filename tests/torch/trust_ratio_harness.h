// Shared by lars_test.cc and lamb_test.cc: trains one small model with a trust-ratio optimizer
// in one process, under DistributedDataParallel, ZeroDataParallel or FullyShardedDataParallel
// on thread ranks, from the same initial weights and data, so that the runs can be compared.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/optim/trust_ratio.h"

namespace cohort::testing {

enum class Wrap { kOneProcess, kDdp, kZero1, kZero2, kFullShard, kHybridShard };
const char* wrap_name(Wrap wrap);
// wrap_name without '-' and '_', as gtest wants a parameter's name.
std::string wrap_test_name(Wrap wrap);

// Builds the optimizer over `named` (the tensors it steps, by parameter name: the module's
// parameters, or the wrapper's shards) of `module`, with `reduction`.
using MakeOptimizer = std::function<std::unique_ptr<optim::TrustRatioOptimizer>(
    const torch::OrderedDict<std::string, torch::Tensor>& named, const torch::nn::Module& module,
    optim::NormReduction reduction)>;

struct TrainCase {
  Wrap wrap = Wrap::kOneProcess;
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

}  // namespace cohort::testing
