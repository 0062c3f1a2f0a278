// What Lars and Lamb share inside the library: squared norms, the state map's key, and the
// checks of their options.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

namespace cohort::optim::detail {

// ||t||^2 in float64, as a 0-dim tensor on t's device (0 for an undefined or empty tensor).
torch::Tensor squared_norm(const torch::Tensor& t);

// The key of `p` in an optimizer's state map: a string in libtorch 1.13, the TensorImpl pointer
// in later releases.
template <typename Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // as c10::guts::to_string writes the pointer
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// `p`'s key in `optimizer`'s state map, of whichever key type this libtorch has.
inline auto state_key(const torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  return state_key<Key>(p);
}

// The state the optimizer keeps for `p`, made empty if it has none.
template <typename State>
State* state_for(torch::optim::Optimizer& optimizer, const torch::Tensor& p) {
  auto& state = optimizer.state();
  const auto key = state_key(optimizer, p);
  auto it = state.find(key);
  if (it == state.end()) it = state.emplace(key, std::make_unique<State>()).first;
  return static_cast<State*>(it->second.get());
}

// Throws InvalidArgument "<optimizer>: <option> ... got <value> (param group <g>)" unless ok.
void check_option(bool ok, const char* optimizer, const char* requirement, double value,
                  size_t group);

}  // namespace cohort::optim::detail
