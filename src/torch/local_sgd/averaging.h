// What the model averagers of local_sgd.h share: the fused averaging allreduce, the averaging of
// optimizer state, the first-call check of the parameters and the step arithmetic.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort::local_sgd {

// Collective: replaces every tensor by its average over `group`. The tensors are packed into
// one flat buffer per dtype (in order of first appearance, the same on every rank when the
// tensors are), each buffer is allreduced once with ReduceOp::kAvg, and the averages are copied
// back without recording autograd history. Floating-point tensors only (InvalidArgument else).
void average_fused(Group& group, const std::vector<torch::Tensor>& tensors, const std::string& who);

// Collective: averages every floating-point tensor of the optimizer's per-parameter state over
// `group`, parameter by parameter in param_groups order (the same on every rank; state() itself
// is a hash map keyed by addresses). Returns the entries it left alone ("param 3: step (Int)").
std::vector<std::string> average_optimizer_state(Group& group, torch::optim::Optimizer& optimizer,
                                                 const std::string& who);

// Collective: throws InvalidArgument on every rank when the ranks' parameters differ in number,
// shape or dtype, naming the first difference.
void check_same_parameters(Group& group, const std::vector<torch::Tensor>& parameters,
                           const std::string& who);

// What every average() call of a model averager checks first: that an optimizer was passed
// where `average_state` asks for its state to be averaged, and, on the first call (`checked`
// false; set here) on every rank, averaging or not, that the ranks' parameters match, so that
// a mismatch shows before the first averaging round, naming the parameter.
void check_call(Group& group, const std::vector<torch::Tensor>& parameters,
                const torch::optim::Optimizer* optimizer, bool average_state, bool& checked,
                const std::string& who);

// One averaging round over `group`: the parameters (average_fused), then, with
// `average_state` and an optimizer, the optimizer's state, whose entries left alone replace
// `unaveraged_state`. Collective.
void average_round(Group& group, const std::vector<torch::Tensor>& parameters,
                   torch::optim::Optimizer* optimizer, bool average_state,
                   std::vector<std::string>& unaveraged_state, const std::string& who);

// Whether the call numbered `step` (from 0) is due for averaging every `period` calls after
// `warmup_steps`.
inline bool due(int64_t step, int64_t warmup_steps, int64_t period) {
  return step >= warmup_steps && (step - warmup_steps) % period == 0;
}

// The module's parameters that require grad, each once.
std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module);

}  // namespace cohort::local_sgd
