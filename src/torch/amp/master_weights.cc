#include "cohort/torch/amp/master_weights.h"

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "autograd_compat.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "operator_observer.h"
#include "optim/optimizer_check.h"

namespace cohort::amp {
namespace {

void check_dtype(torch::Dtype dtype) {
  COHORT_CHECK(dtype == torch::kBFloat16 || dtype == torch::kFloat16,
               "MasterWeights: the model's dtype must be torch::kBFloat16 or torch::kFloat16, "
               "not ",
               c10::toString(dtype),
               "; the masters are float32 (for float32 training, leave MasterWeights out)");
}

// Cheap signs that a wrapper already holds the parameters: FSDP made them views of a unit's flat
// storage, which its operator watcher knows (and routes their gradients through a node of its
// own while gathered: no longer leaves); DDP and ZeRO hook their accumulators. The wrapper
// would go on reducing buckets or shards of the old float32 tensors.
void check_not_wrapped(const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    const bool wrapped = !p.is_leaf() || autograd_compat::has_post_accumulate_hooks(p) ||
                         storage_is_watched(p.storage().unsafeGetStorageImpl());
    COHORT_CHECK(!wrapped, "MasterWeights: parameter '", item.key(),
                 "' already belongs to a DistributedDataParallel, ZeroDataParallel or "
                 "FullyShardedDataParallel (its gradient is hooked). Construct MasterWeights "
                 "first, then the wrapper, so that it buckets the 16-bit parameters. Under FSDP "
                 "use MixedPrecisionPolicy::param_dtype instead: its float32 shards are the "
                 "master copy");
  }
}

// Replaces the data of every floating-point tensor by its `dtype` copy; the tensor objects
// (and so every holder of them) stay.
void convert(const std::vector<torch::Tensor>& tensors, torch::Dtype dtype) {
  for (const auto& t : tensors) {
    if (!t.defined() || !t.is_floating_point() || t.scalar_type() == dtype) continue;
    t.set_data(t.detach().to(dtype));
  }
}

}  // namespace

MasterWeights::MasterWeights(std::shared_ptr<torch::nn::Module> module, torch::Dtype dtype)
    : module_(std::move(module)), dtype_(dtype) {
  COHORT_CHECK(module_ != nullptr, "MasterWeights: the module is null");
  check_dtype(dtype);
  check_not_wrapped(*module_);
  torch::NoGradGuard no_grad;
  convert(module_->parameters(), dtype);
  convert(module_->buffers(), dtype);
  for (const auto& item : module_->named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !p.is_floating_point()) continue;
    names_.push_back(item.key());
    model_.push_back(p);
    // Note [Masters from the model]: of the rounded model, so that masters and model agree.
    masters_.push_back(p.detach().to(torch::kFloat32).set_requires_grad(true));
  }
}

torch::OrderedDict<std::string, torch::Tensor> MasterWeights::named_parameters() const {
  torch::OrderedDict<std::string, torch::Tensor> out;
  for (size_t i = 0; i < masters_.size(); ++i) out.insert(names_[i], masters_[i]);
  return out;
}

void MasterWeights::copy_gradients_to_masters() {
  if (!synced_) copy_model_to_masters();
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) {
    const torch::Tensor& grad = model_[i].grad();
    auto& master_grad = masters_[i].mutable_grad();
    if (!grad.defined()) {
      master_grad = torch::Tensor();
    } else if (master_grad.defined()) {
      master_grad.copy_(grad);
    } else {
      master_grad = grad.to(torch::kFloat32);  // a new tensor: the dtype changes
    }
  }
  gradients_copied_ = true;
}

// Note [Masters from the model]: the masters start as the model's 16-bit values (as apex's
// do), not as the float32 weights before rounding: DistributedDataParallel, built after this
// object, overwrites every rank's model with rank 0's, and a master kept from a rank's own
// float32 initialization would then differ from rank to rank. The first copy of gradients takes
// the masters from the model once more, which picks up that broadcast (or a checkpoint loaded
// into the model) identically on every rank.
void MasterWeights::copy_model_to_masters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) masters_[i].copy_(model_[i]);
  synced_ = true;
}

namespace {

// The submodule at `path` ("a.b") of `root`, made (empty) where it does not exist yet.
torch::nn::Module& submodule_at(torch::nn::Module& root, const std::string& path) {
  torch::nn::Module* module = &root;
  size_t begin = 0;
  while (begin < path.size()) {
    const size_t dot = std::min(path.find('.', begin), path.size());
    const std::string name = path.substr(begin, dot - begin);
    auto children = module->named_children();
    if (!children.contains(name)) {
      module->register_module(name, std::make_shared<torch::nn::Module>(name));
      children = module->named_children();
    }
    module = children[name].get();
    begin = dot + 1;
  }
  return *module;
}

// Registers `tensor` under the full name `name` ("a.b.weight") in the tree of `root`.
void register_at(torch::nn::Module& root, const std::string& name, const torch::Tensor& tensor,
                 bool parameter) {
  const size_t dot = name.rfind('.');
  torch::nn::Module& owner =
      dot == std::string::npos ? root : submodule_at(root, name.substr(0, dot));
  const std::string leaf = dot == std::string::npos ? name : name.substr(dot + 1);
  if (parameter) {
    owner.register_parameter(leaf, tensor, tensor.requires_grad());
  } else {
    owner.register_buffer(leaf, tensor);
  }
}

}  // namespace

std::shared_ptr<torch::nn::Module> MasterWeights::checkpoint_module() {
  if (checkpoint_module_) return checkpoint_module_;
  if (!synced_) copy_model_to_masters();  // DDP's broadcast, before anything is saved
  auto root = std::make_shared<torch::nn::Module>("MasterWeights");
  // Every submodule, with tensors or not (an activation): a checkpoint holds a section per
  // submodule, and loading it into the model itself must find them all.
  for (const auto& item : module_->named_modules("", /*include_self=*/false)) {
    submodule_at(*root, item.key());
  }
  const auto masters = named_parameters();
  for (const auto& item : module_->named_parameters()) {
    const torch::Tensor* master = masters.find(item.key());
    register_at(*root, item.key(), master != nullptr ? *master : item.value(), true);
  }
  for (const auto& item : module_->named_buffers()) {
    register_at(*root, item.key(), item.value(), false);
  }
  checkpoint_module_ = root;
  return root;
}

void MasterWeights::loaded_into_masters() {
  synced_ = true;  // the masters are the authority now, not the model's rounding of them
  copy_masters_to_model();
}

void MasterWeights::copy_masters_to_model() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < masters_.size(); ++i) model_[i].copy_(masters_[i]);  // rounds to 16-bit
}

bool MasterWeights::step(torch::optim::Optimizer& optimizer, GradScaler* scaler) {
  check_optimizer(optimizer);
  if (!gradients_copied_) copy_gradients_to_masters();
  bool stepped = true;
  if (scaler != nullptr) {
    stepped = scaler->step(optimizer);
  } else {
    optimizer.step();
  }
  if (stepped) copy_masters_to_model();
  release_master_gradients();
  return stepped;
}

void MasterWeights::zero_grad() {
  module_->zero_grad(/*set_to_none=*/false);
  release_master_gradients();
}

// Note [Master gradients]: the float32 gradients exist from copy_gradients_to_masters() to the
// end of step(), not between steps: with Adam the steady state is 2 (model) + 4 (master) + 2
// (16-bit gradient) + 8 (moments) bytes per parameter, not 20 (docs/amp.md).
void MasterWeights::release_master_gradients() {
  for (auto& master : masters_) master.mutable_grad() = torch::Tensor();
  gradients_copied_ = false;
}

void MasterWeights::check_optimizer(const torch::optim::Optimizer& optimizer) const {
  std::unordered_set<const void*> masters;
  for (const auto& m : masters_) masters.insert(m.unsafeGetTensorImpl());
  const auto foreign = find_foreign_tensor(optimizer, [&](const torch::Tensor& t) {
    return masters.count(t.unsafeGetTensorImpl()) != 0;
  });
  if (!foreign) return;
  std::string what = "a tensor that is not one of the float32 masters";
  for (size_t k = 0; k < model_.size(); ++k) {
    if (model_[k].unsafeGetTensorImpl() == foreign->tensor.unsafeGetTensorImpl()) {
      what = "the model's own " + std::string(c10::toString(dtype_)) + " parameter '" + names_[k] +
             "'";
    }
  }
  throw InvalidArgument(detail::concat(
      "MasterWeights::step: the optimizer's param group ", foreign->group, " holds, at ",
      foreign->index, ", ", what, " (shape ", foreign->shape(),
      "). Build the optimizer over master_weights.parameters() (or named_parameters()): the "
      "masters are what it must update, in float32; the model's parameters are overwritten "
      "from them after each step."));
}

}  // namespace cohort::amp
