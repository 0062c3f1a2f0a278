// cohort::checkpoint: activation checkpointing for libtorch. A checkpointed region keeps only
// its inputs through the forward pass; its intermediate activations are dropped and computed
// again, from those inputs, when backward reaches the region. Memory then grows with the
// boundaries between regions instead of with every activation, at the cost of one more forward
// of each region.
//
//   // a function of tensors: anything it reads that needs a gradient (parameters, captured
//   // activations) gets it, as without checkpointing
//   auto b = block.ptr();  // a std::shared_ptr to the module, for the region to hold
//   torch::Tensor y = cohort::checkpoint([b](const torch::Tensor& x) { return b->forward(x); }, x);
//   // several inputs and outputs
//   auto m = mix.ptr();
//   std::vector<torch::Tensor> out = cohort::checkpoint(
//       [m](const std::vector<torch::Tensor>& in) { return std::vector{m->forward(in[0], in[1])}; },
//       {a, b});
//
// The region is called again during backward, after the code that made it has returned:
// capture by value (a shared_ptr to the module, as above), never by reference to a local of
// forward().
//   // a module: its buffers (BatchNorm's running statistics) are updated once, not twice
//   torch::Tensor z = cohort::checkpoint(block, x);
//
// How it works without Python's saved-tensor hooks (libtorch's take only Python objects), and
// how it composes with DDP, ZeRO, FSDP, no_sync, autocast, the GradScaler and SyncBatchNorm:
// docs/activation_checkpointing.md. In short: the region runs once with autograd recording, the
// graph it recorded is inspected to find every tensor outside the region that needs its gradient
// (parameters, captured activations), and then dropped; one autograd node stands for the whole
// region, with those tensors and the region's inputs as its inputs. Its backward restores the
// random-number generators and the autocast state of the forward, runs the region again and
// returns the gradients of all of them in one pass: each parameter receives one gradient per
// backward from the outer graph, exactly as without checkpointing, so DDP's hooks, FSDP's
// gradient nodes and ZeRO see nothing different.
//
// The semantics are those of PyTorch's torch.utils.checkpoint with use_reentrant=False: the
// parameters of a region whose inputs need no gradient still get theirs; under NoGradGuard (or
// when nothing the region reads needs a gradient) the region just runs.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cohort {

struct CheckpointOptions {
  // Save the CPU generator's state (and that of every CUDA device an input is on) before the
  // forward and restore it for the recomputation, so that dropout draws the same mask both
  // times and the gradients equal those of an uncheckpointed run. Off: the default generators
  // are left alone (the recomputation draws other masks: wrong gradients if the region draws
  // from them).
  bool preserve_rng_state = true;
  // Generators of the region's own, saved and restored likewise whatever preserve_rng_state
  // says. Where ranks are threads of one process (which share the default generators, so that
  // rewinding them for one rank's recomputation disturbs another's draws), give each rank its
  // own generator here and turn preserve_rng_state off.
  std::vector<at::Generator> generators;
  // Tensors the region updates in place as a side effect (BatchNorm's running statistics and
  // num_batches_tracked): saved before the recomputation and put back after it, so that the
  // forward's update counts once. The module forms of checkpoint() pass the module's buffers.
  std::vector<torch::Tensor> restore_after_recompute;
  // Names the region in errors ("blocks.3"); checkpoint_modules names its regions by path.
  std::string name;
};

using CheckpointRegion = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Runs region(inputs) without keeping its intermediate activations and returns its outputs,
// whose backward recomputes them. The region must be a function of its inputs, of what it
// captures and of the random numbers it draws: it may not change its inputs in place, nor may
// they be changed between the forward and the backward (both raise InvalidArgument instead of
// giving a wrong gradient). Outputs must be defined tensors, none sharing memory with another
// that needs a gradient. Higher-order gradients (create_graph) through a region are refused.
// A region of a lambda that runs a BatchNorm lists its buffers in restore_after_recompute (the
// module forms do). Throws InvalidArgument naming what was wrong.
std::vector<torch::Tensor> checkpoint_region(const CheckpointRegion& region,
                                             const std::vector<torch::Tensor>& inputs,
                                             const CheckpointOptions& options = {});

namespace detail {
template <typename T>
constexpr bool kIsModuleHolder =
    std::is_base_of_v<torch::detail::ModuleHolderIndicator, std::decay_t<T>>;
// Whether Region is a region of `Tensors` (a module holder never is: its call operator cannot
// be asked without a hard error).
template <typename Region, typename Tensors>
constexpr bool region_of() {
  if constexpr (kIsModuleHolder<Region>) {
    return false;
  } else {
    return std::is_invocable_r_v<Tensors, Region&, const Tensors&>;
  }
}
torch::Tensor checkpoint_one(const std::function<torch::Tensor(const torch::Tensor&)>& region,
                             const torch::Tensor& input, const CheckpointOptions& options);
}  // namespace detail

// The same, for a region of several tensors: region(const std::vector<torch::Tensor>&) returns
// a std::vector<torch::Tensor>.
template <typename Region,
          std::enable_if_t<detail::region_of<Region, std::vector<torch::Tensor>>(), int> = 0>
std::vector<torch::Tensor> checkpoint(Region&& region, const std::vector<torch::Tensor>& inputs,
                                      const CheckpointOptions& options = {}) {
  return checkpoint_region(CheckpointRegion(std::forward<Region>(region)), inputs, options);
}

// One tensor in, one tensor out: region(const torch::Tensor&) returns a torch::Tensor.
template <typename Region, std::enable_if_t<detail::region_of<Region, torch::Tensor>(), int> = 0>
torch::Tensor checkpoint(Region&& region, const torch::Tensor& input,
                         const CheckpointOptions& options = {}) {
  return detail::checkpoint_one(std::forward<Region>(region), input, options);
}

namespace detail {
// The options of a module's region: the module's buffers are restored after the recomputation.
CheckpointOptions module_region_options(const torch::nn::Module& module,
                                        const CheckpointOptions& options);
}  // namespace detail

// module->forward(input), checkpointed while the module is training (in eval() it just runs:
// there is no backward to recompute for). Its buffers are restored after the recomputation.
template <typename ModuleImpl>
torch::Tensor checkpoint(const torch::nn::ModuleHolder<ModuleImpl>& module,
                         const torch::Tensor& input, const CheckpointOptions& options = {}) {
  std::shared_ptr<ModuleImpl> impl = module.ptr();
  if (!impl->is_training()) return impl->forward(input);
  return detail::checkpoint_one([impl](const torch::Tensor& x) { return impl->forward(x); },
                                input, detail::module_region_options(*impl, options));
}

}  // namespace cohort
