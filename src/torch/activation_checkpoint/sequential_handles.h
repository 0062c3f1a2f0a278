// The handles checkpoint_modules puts into a torch::nn::Sequential's list of children
// (Note [Checkpoint handles] in sequential_handles.cc).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/torch/activation_checkpoint/checkpoint.h"

namespace cohort::activation_checkpoint {

// Runs children [begin, end) of a Sequential (their own handles, in order) as one checkpointed
// region, in the place of child `begin`.
class CheckpointedSpanImpl : public torch::nn::Module {
 public:
  CheckpointedSpanImpl(std::vector<torch::nn::AnyModule> children, CheckpointOptions options);
  torch::Tensor forward(torch::Tensor x);

 private:
  std::shared_ptr<std::vector<torch::nn::AnyModule>> children_;  // shared with the region
  CheckpointOptions options_;
};

// In the place of children begin + 1, ..., end - 1 of a span: returns its input (the span's
// handle ran them already).
class SpanContinuationImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(torch::Tensor x) { return x; }
};

// Whether a handle is one of the two above (its child is checkpointed already).
bool is_checkpoint_handle(const torch::nn::Module& handle);

}  // namespace cohort::activation_checkpoint
