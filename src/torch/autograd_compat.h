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
// What FSDP needs besides (Note [FSDP interception] in shard/fsdp.cc):
//  - a parameter made the output of a node of its own (its gradient edge), so that one node
//    receives every gradient of a unit's parameters;
//  - a storage whose memory is released and allocated again while every tensor over it keeps
//    its shape (what PyTorch's FSDP does with storage().resize_(0)).
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

// Whether hooks run after `parameter`'s gradient is accumulated (DistributedDataParallel and
// ZeroDataParallel install them): without creating an accumulator where there is none.
inline bool has_post_accumulate_hooks(const torch::Tensor& parameter) {
  auto accumulator = torch::autograd::impl::try_get_grad_accumulator(parameter);
  return accumulator != nullptr && !accumulator->post_hooks().empty();
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

namespace detail {
class GradientSink final : public Node {
 public:
  explicit GradientSink(std::function<void(std::vector<torch::Tensor>&&)> fn)
      : Node(/*sequence_nr=*/UINT64_MAX), fn_(std::move(fn)) {}  // runs as soon as it is ready
  std::string name() const override { return "cohort::GradientSink"; }
  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override {
    fn_(std::move(gradients));
    return {};
  }

 private:
  std::function<void(std::vector<torch::Tensor>&&)> fn_;
};
}  // namespace detail

// Makes every tensor of `tensors` (parameters that require grad) an output of one new node:
// the operations recorded from now on send their gradients to it instead of accumulating them
// into .grad, and in a backward pass it calls fn once, with one gradient per tensor (undefined
// where the pass gave that tensor none), when every gradient that pass will produce has
// arrived. An exception from fn leaves backward(). Keep the returned node alive while it must
// be reachable; clear_gradient_route makes a tensor a leaf again.
inline std::shared_ptr<Node> route_gradients(const std::vector<torch::Tensor>& tensors,
                                             std::function<void(std::vector<torch::Tensor>&&)> fn) {
  auto node = std::make_shared<detail::GradientSink>(std::move(fn));
  for (const auto& tensor : tensors) {
    const uint32_t input = node->add_input_metadata(tensor);
    torch::autograd::impl::set_gradient_edge(tensor, torch::autograd::Edge(node, input));
  }
  return node;
}
inline void clear_gradient_route(const torch::Tensor& tensor) {
  torch::autograd::impl::set_gradient_edge(tensor, torch::autograd::Edge());
}

// Frees the memory of `tensor`'s storage; the tensors over it keep their shapes and must not
// be read until allocate_storage.
inline void release_storage(const torch::Tensor& tensor) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, tensor.device()));
  storage->set_nbytes(0);
}

// Gives a released storage `nbytes` of fresh (uninitialized) memory from its own allocator.
inline void allocate_storage(const torch::Tensor& tensor, size_t nbytes) {
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

}  // namespace cohort::autograd_compat
