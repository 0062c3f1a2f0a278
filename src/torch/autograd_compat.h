// Every use of libtorch's autograd internals, in one place, so that a change between libtorch
// releases (1.13 on Debian, 2.x for users and the GPU machine) is a change to this file only.
//
// What DDP needs from autograd, none of which torch::nn exposes publicly:
//  - a hook that runs after a parameter's gradient was accumulated into .grad (a post hook on
//    the parameter's AccumulateGrad node; 2.1+ also has register_post_accumulate_grad_hook,
//    1.13 does not);
//  - a callback at the end of the current backward pass (Engine::queue_callback);
//  - a tensor sharing another's storage that autograd does not consider a view, so that
//    Optimizer::zero_grad() may detach_() it (libtorch 1.13 detaches .grad in place, which
//    throws for views).
#pragma once

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

namespace cohort::autograd_compat {

using Node = torch::autograd::Node;
using HookKey = uintptr_t;

// The AccumulateGrad node of a leaf tensor that requires grad. The variable holds it only
// weakly: keep the returned pointer alive for as long as hooks on it must fire.
inline std::shared_ptr<Node> gradient_accumulator(const torch::Tensor& parameter) {
  return torch::autograd::impl::grad_accumulator(parameter);
}

namespace detail {
class PostAccumulateHook : public torch::autograd::FunctionPostHook {
 public:
  explicit PostAccumulateHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};
}  // namespace detail

// Runs `fn` on the autograd thread each time `accumulator` has added a gradient into .grad.
inline HookKey add_post_accumulate_hook(Node& accumulator, std::function<void()> fn) {
  return accumulator.add_post_hook(std::make_unique<detail::PostAccumulateHook>(std::move(fn)));
}

inline void remove_post_accumulate_hook(Node& accumulator, HookKey key) {
  accumulator.del_post_hook(key);
}

// Runs `fn` once the backward pass that is running on this thread has finished every node.
// Only valid from inside a backward pass (a hook). An exception from `fn` leaves backward().
inline void queue_end_of_backward_callback(std::function<void()> fn) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(fn));
}

// A tensor of `like`'s shape and strides over `flat`'s storage from element `offset` on. Not
// an autograd view: zero_grad() may detach_() it, and writes through either are seen by both.
inline torch::Tensor alias_into(const torch::Tensor& flat, int64_t offset,
                                const torch::Tensor& like) {
  torch::NoGradGuard no_grad;
  return torch::empty({0}, flat.options())
      .set_(flat.storage(), flat.storage_offset() + offset, like.sizes(), like.strides());
}

// Elements [offset, offset + length) of a contiguous tensor as a 1-D tensor over its storage,
// likewise not an autograd view (and not tied to `tensor`'s autograd history).
inline torch::Tensor alias_range(const torch::Tensor& tensor, int64_t offset, int64_t length) {
  torch::NoGradGuard no_grad;
  return torch::empty({0}, tensor.options().requires_grad(false))
      .set_(tensor.storage(), tensor.storage_offset() + offset, {length}, {1});
}

}  // namespace cohort::autograd_compat
