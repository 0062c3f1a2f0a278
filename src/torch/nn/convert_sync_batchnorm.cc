// convert_sync_batchnorm: finds every BatchNorm of a model and puts a SyncBatchNorm in its place
// wherever the model's forward can reach it (the parent's children, Sequential, ModuleList,
// ModuleDict), refusing a model where some other holder would keep calling the BatchNorm.
#include <string>
#include <vector>

#include "cohort/core/check.h"
#include "cohort/torch/nn/sync_batch_norm.h"

namespace cohort::nn {

namespace detail {

struct BatchNormConversion {
  template <typename BatchNormImpl>
  static std::shared_ptr<SyncBatchNormImpl> convert(const BatchNormImpl& bn,
                                                    std::shared_ptr<Group> group) {
    SyncBatchNormImpl::Adopted adopted{bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                       bn.num_batches_tracked};
    std::shared_ptr<SyncBatchNormImpl> sync(
        new SyncBatchNormImpl(bn.options, std::move(group), std::move(adopted)));
    sync->train(bn.is_training());
    return sync;
  }
};

}  // namespace detail

namespace {

using torch::nn::Module;

// The SyncBatchNorm that stands for `module` when it is a BatchNorm1d, 2d or 3d; else null.
std::shared_ptr<SyncBatchNormImpl> sync_replacement(const std::shared_ptr<Module>& module,
                                                    const std::shared_ptr<Group>& group) {
  using detail::BatchNormConversion;
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm1dImpl>(module))
    return BatchNormConversion::convert(*bn, group);
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(module))
    return BatchNormConversion::convert(*bn, group);
  if (auto bn = std::dynamic_pointer_cast<torch::nn::BatchNorm3dImpl>(module))
    return BatchNormConversion::convert(*bn, group);
  return nullptr;
}

struct Replacement {
  std::shared_ptr<Module> parent;
  std::string name;  // under the parent
  std::string path;  // from the root, for errors
  std::shared_ptr<Module> layer;
  std::shared_ptr<SyncBatchNormImpl> sync;
};

bool is_container(const Module& module) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
}

void find_batch_norms(const std::shared_ptr<Module>& parent, const std::string& path,
                      const std::shared_ptr<Group>& group, std::vector<Replacement>& found) {
  for (const auto& child : parent->named_children()) {
    const std::string child_path = path.empty() ? child.key() : path + "." + child.key();
    if (auto sync = sync_replacement(child.value(), group)) {
      found.push_back({parent, child.key(), child_path, child.value(), std::move(sync)});
    } else {
      find_batch_norms(child.value(), child_path, group, found);
    }
  }
}

// A layer is held by its parent's children, by the container's own list where the parent is a
// Sequential, ModuleList or ModuleDict, and by `found`: anything more is another holder.
void check_only_reachable_holders(const Replacement& r) {
  const long expected = 2 + (is_container(*r.parent) ? 1 : 0);
  COHORT_CHECK(r.layer.use_count() <= expected, "convert_sync_batchnorm: the BatchNorm '", r.path,
               "' is also held outside its parent's list of children (typically a member such "
               "as `torch::nn::BatchNorm2d bn_` that forward() calls), so its forward would go on "
               "normalizing each rank's batch alone. Declare that member as "
               "cohort::nn::SyncBatchNorm instead, or hold the layer in a torch::nn::Sequential; "
               "nothing was changed");
}

void replace(const Replacement& r) {
  r.parent->replace_module(r.name, r.sync);
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(r.parent.get())) {
    for (auto& item : *sequential)
      if (item.ptr() == r.layer) item = torch::nn::AnyModule(r.sync);
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(r.parent.get())) {
    for (auto& item : *list)
      if (item == r.layer) item = r.sync;
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(r.parent.get())) {
    for (auto& item : *dict)
      if (item.value() == r.layer) item.value() = r.sync;
  }
}

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<Group> group) {
  COHORT_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  COHORT_CHECK(group != nullptr,
               "convert_sync_batchnorm: the group is null; pass the group "
               "whose ranks' batches form the global batch (the one DDP uses)");
  if (auto sync = sync_replacement(module, group)) return sync;
  std::vector<Replacement> found;
  find_batch_norms(module, "", group, found);
  for (const Replacement& r : found) check_only_reachable_holders(r);
  for (const Replacement& r : found) replace(r);
  return module;
}

}  // namespace cohort::nn
