// An optimizer's per-tensor state and param-group options as plain data, so that a sharded
// checkpoint can cut the state of one tensor into ranges, put ranges of several ranks back
// together, and rebuild the state object of another tensor from them (Note [Re-sliced state]).
//
// Note [Re-sliced state]
// The optimizers a sharded checkpoint takes update each element from its own state only
// (SGD's momentum, Adam's and AdamW's moments, Adagrad's sum, RMSprop's averages, LARS's
// momentum and LAMB's moments: their trust ratios are computed afresh each step), so the state
// of any range of a parameter is that range of each state tensor, plus the scalars (step) that
// every element of the parameter shares. libtorch has no common way to list a state's tensors,
// so each known optimizer says its own (OptimizerCodec); others are refused by name.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace cohort::detail {

// One tensor's state: its state tensors by name (undefined ones left out), and `step` where
// the optimizer counts one.
struct FlatState {
  bool has_step = false;
  int64_t step = 0;
  std::vector<std::pair<std::string, torch::Tensor>> fields;
};

class OptimizerCodec {
 public:
  virtual ~OptimizerCodec() = default;
  // "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "LARS", "LAMB".
  virtual const char* kind() const = 0;
  virtual bool matches(const torch::optim::Optimizer& optimizer) const = 0;
  virtual nlohmann::json options_json(const torch::optim::OptimizerOptions& options) const = 0;
  // A copy of `options` with the values of `json`; throws nlohmann::json::exception for a
  // missing or mistyped value.
  virtual std::unique_ptr<torch::optim::OptimizerOptions> options_from_json(
      const nlohmann::json& json, const torch::optim::OptimizerOptions& options) const = 0;
  // The state tensors as they are (the shape of the tensor they belong to).
  virtual FlatState read_state(const torch::optim::OptimizerParamState& state) const = 0;
  // A state object with `state`'s tensors (already shaped as the tensor they belong to).
  virtual std::unique_ptr<torch::optim::OptimizerParamState> make_state(
      const FlatState& state) const = 0;
  // An optimizer of this kind over `groups` (for the file of a gathered save).
  virtual std::unique_ptr<torch::optim::Optimizer> make_optimizer(
      std::vector<torch::optim::OptimizerParamGroup> groups,
      const torch::optim::OptimizerOptions& defaults) const = 0;
};

// The codec of `optimizer`'s class, or null for one a sharded checkpoint does not know.
const OptimizerCodec* codec_of(const torch::optim::Optimizer& optimizer);
// The codec of kind `kind`, or null.
const OptimizerCodec* codec_named(const std::string& kind);
// The kinds known, for messages: "SGD, Adam, AdamW, Adagrad and RMSprop".
const char* known_optimizers();

// The state `optimizer` keeps for `tensor`, or null (its state is keyed by the tensor's
// TensorImpl: a string in libtorch 1.13, a pointer in later releases).
const torch::optim::OptimizerParamState* state_of(const torch::optim::Optimizer& optimizer,
                                                  const torch::Tensor& tensor);
// Sets (or, for null, erases) the state `optimizer` keeps for `tensor`.
void set_state_of(torch::optim::Optimizer& optimizer, const torch::Tensor& tensor,
                  std::unique_ptr<torch::optim::OptimizerParamState> state);
// Puts `state` in place of the state `optimizer` keeps for `tensor`, and returns that one.
std::unique_ptr<torch::optim::OptimizerParamState> swap_state_of(
    torch::optim::Optimizer& optimizer, const torch::Tensor& tensor,
    std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace cohort::detail
