// Note [Checkpoint handles]
// A torch::nn::Sequential keeps two lists: its registered children (what named_modules(),
// parameters(), to() and train() walk) and one AnyModule per child, through which its
// forward() calls them. checkpoint_modules replaces only entries of the second list: child i
// is called through a CheckpointedSpanImpl that runs the original handles of children
// [i, end) inside one cohort::checkpoint region, and children i+1 ... end-1 through
// SpanContinuationImpl, which passes the span's output on. The handles are not registered
// modules, so the model's tree, parameter names and state are untouched and DDP, ZeRO and FSDP
// (which read the tree) see the model they would see without checkpointing.

#include "activation_checkpoint/sequential_handles.h"

#include <c10/util/Type.h>

#include "cohort/core/check.h"

namespace cohort::activation_checkpoint {

CheckpointedSpanImpl::CheckpointedSpanImpl(std::vector<torch::nn::AnyModule> children,
                                           CheckpointOptions options)
    : children_(std::make_shared<std::vector<torch::nn::AnyModule>>(std::move(children))),
      options_(std::move(options)) {
  for (const auto& child : *children_) options_ = detail::module_region_options(*child.ptr(), options_);
}

namespace {

torch::Tensor run_children(std::vector<torch::nn::AnyModule>& children, const torch::Tensor& x,
                           const std::string& name) {
  torch::nn::AnyValue value = children.front().any_forward(x);
  for (size_t i = 1; i < children.size(); ++i) value = children[i].any_forward(std::move(value));
  if (auto* tensor = value.try_get<torch::Tensor>()) return *tensor;
  throw InvalidArgument(
      "checkpoint_modules: the checkpointed module '" + name + "' returned a " +
      c10::demangle(value.type_info().name()) +
      ", not a tensor; a module checkpointed through a Sequential takes one tensor and returns "
      "one. Checkpoint a region of tensors with cohort::checkpoint(region, inputs) instead");
}

}  // namespace

// Under NoGradGuard checkpoint() itself just runs the region.
torch::Tensor CheckpointedSpanImpl::forward(torch::Tensor x) {
  auto children = children_;
  const std::string name = options_.name;
  if (!children->front().ptr()->is_training()) return run_children(*children, x, name);
  return checkpoint(
      [children, name](const torch::Tensor& in) { return run_children(*children, in, name); }, x,
      options_);
}

bool is_checkpoint_handle(const torch::nn::Module& handle) {
  return dynamic_cast<const CheckpointedSpanImpl*>(&handle) != nullptr ||
         dynamic_cast<const SpanContinuationImpl*>(&handle) != nullptr;
}

}  // namespace cohort::activation_checkpoint
