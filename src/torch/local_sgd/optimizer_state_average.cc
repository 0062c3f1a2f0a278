// Note [Averaging optimizer state]
// torch::optim keeps per-parameter state behind OptimizerParamState, a polymorphic type whose
// only generic access is serialize(): SGD's momentum_buffer, Adam's exp_avg and exp_avg_sq,
// cohort's LARS/LAMB state and any user optimizer's all go through it under their own keys. So
// the state of each parameter is written to an archive, read back (InputArchive gives each
// entry as an IValue aliasing what it holds), its floating-point tensors are averaged in place
// with everybody else's in one fused allreduce per dtype, and the state reads itself back from
// that archive. The round trip copies the state twice; averaging state is as rare as averaging
// the model, and costs more in communication than these copies.
#include <sstream>

#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "local_sgd/averaging.h"
#include "optim/trust_ratio.h"

namespace cohort::local_sgd {
namespace {

std::string describe(const c10::IValue& value) {
  if (value.isTensor())
    return std::string(c10::toString(value.toTensor().scalar_type())) + " tensor";
  return value.tagKind();
}

// Whether each parameter (in param_groups order) has state on every rank. A rank that skipped
// a step the others took (a GradScaler overflow on it alone, in local SGD's local phase) may
// lack some, and the fused allreduce must pair the same tensors on every rank.
std::vector<bool> stepped_everywhere(Group& group, torch::optim::Optimizer& optimizer) {
  std::vector<int32_t> has_state;
  for (auto& param_group : optimizer.param_groups()) {
    for (const auto& parameter : param_group.params()) {
      auto found = optimizer.state().find(optim::detail::state_key(optimizer, parameter));
      has_state.push_back(found != optimizer.state().end() && found->second != nullptr);
    }
  }
  auto flags = torch::tensor(has_state, torch::kInt32);
  CollectiveOptions everywhere;
  everywhere.op = ReduceOp::kMin;
  group.allreduce(tensor_buffer(flags), everywhere);
  std::vector<bool> result;
  for (int64_t i = 0; i < flags.numel(); ++i) result.push_back(flags[i].item<int32_t>() != 0);
  return result;
}

}  // namespace

std::vector<std::string> average_optimizer_state(Group& group, torch::optim::Optimizer& optimizer,
                                                 const std::string& who) {
  std::vector<std::string> unaveraged;
  std::vector<std::pair<torch::optim::OptimizerParamState*, torch::serialize::InputArchive>> read;
  std::vector<torch::Tensor> tensors;
  auto& states = optimizer.state();
  const std::vector<bool> everywhere = stepped_everywhere(group, optimizer);
  size_t index = 0;
  for (auto& param_group : optimizer.param_groups()) {
    for (const auto& parameter : param_group.params()) {
      const size_t this_index = index++;
      auto found = states.find(optim::detail::state_key(optimizer, parameter));
      if (found == states.end() || found->second == nullptr) continue;  // not stepped yet
      if (!everywhere[this_index]) {
        unaveraged.push_back(detail::concat("param ", this_index, ": no state on some rank yet"));
        continue;
      }
      torch::serialize::OutputArchive out;
      found->second->serialize(out);
      std::stringstream bytes;
      out.save_to(bytes);
      torch::serialize::InputArchive in;
      in.load_from(bytes);
      for (const auto& key : in.keys()) {
        c10::IValue value;
        in.read(key, value);
        if (value.isTensor() && value.toTensor().is_floating_point()) {
          tensors.push_back(value.toTensor());
        } else {
          unaveraged.push_back(
              detail::concat("param ", this_index, ": ", key, " (", describe(value), ")"));
        }
      }
      read.emplace_back(found->second.get(), std::move(in));
    }
  }
  average_fused(group, tensors, who);
  for (auto& [state, in] : read) state->serialize(in);
  return unaveraged;
}

}  // namespace cohort::local_sgd
