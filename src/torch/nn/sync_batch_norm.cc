#include "cohort/torch/nn/sync_batch_norm.h"

#include <ostream>

#include "cohort/core/check.h"
#include "sync_batch_norm_ops.h"

namespace cohort::nn {

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options,
                                     std::shared_ptr<Group> group)
    : SyncBatchNormImpl(options, std::move(group), Adopted{}) {}

SyncBatchNormImpl::SyncBatchNormImpl(const torch::nn::BatchNormOptions& options,
                                     std::shared_ptr<Group> group, Adopted adopted)
    : options_(options), group_(std::move(group)), adopted_(std::move(adopted)) {
  COHORT_CHECK(group_ != nullptr,
               "SyncBatchNorm: the group is null; pass the group whose ranks' "
               "batches form the global batch (the one DDP uses)");
  COHORT_CHECK(options_.num_features() > 0, "SyncBatchNorm: num_features must be positive, got ",
               options_.num_features());
  reset();
}

void SyncBatchNormImpl::set_group(std::shared_ptr<Group> group) {
  COHORT_CHECK(group != nullptr, "SyncBatchNorm::set_group: the group is null");
  group_ = std::move(group);
}

// Registers weight, bias and the running statistics under BatchNorm's names: the adopted tensors
// of a converted BatchNorm the first time, new ones after (clone()).
void SyncBatchNormImpl::reset() {
  const int64_t c = options_.num_features();
  const bool adopting = adopted_.running_mean.defined() || adopted_.weight.defined();
  if (options_.affine()) {
    weight = register_parameter("weight", adopting ? adopted_.weight : torch::empty({c}));
    bias = register_parameter("bias", adopting ? adopted_.bias : torch::empty({c}));
  } else {
    weight = register_parameter("weight", torch::Tensor(), /*requires_grad=*/false);
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  if (options_.track_running_stats()) {
    running_mean =
        register_buffer("running_mean", adopting ? adopted_.running_mean : torch::zeros({c}));
    running_var =
        register_buffer("running_var", adopting ? adopted_.running_var : torch::ones({c}));
    num_batches_tracked = register_buffer(
        "num_batches_tracked",
        adopting ? adopted_.num_batches_tracked : torch::tensor(0, torch::dtype(torch::kLong)));
  } else {
    running_mean = register_buffer("running_mean", torch::Tensor());
    running_var = register_buffer("running_var", torch::Tensor());
    num_batches_tracked = register_buffer("num_batches_tracked", torch::Tensor());
  }
  if (!adopting) reset_parameters();
  adopted_ = Adopted{};
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options_.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options_.affine()) return;
  torch::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "cohort::nn::SyncBatchNorm(" << options_.num_features() << ", eps=" << options_.eps()
         << ", momentum=";
  if (options_.momentum()) {
    stream << *options_.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << std::boolalpha << options_.affine()
         << ", track_running_stats=" << options_.track_running_stats()
         << ", ranks=" << group_->size() << ")";
}

// Counts a training batch and returns its weight in the running statistics, as torch's
// BatchNorm does: momentum or, where that is unset, the cumulative average (1 / batches).
double SyncBatchNormImpl::count_batch() {
  num_batches_tracked.add_(1);
  return options_.momentum() ? *options_.momentum() : 1.0 / num_batches_tracked.item<double>();
}

// The unbiased variance uses the global count, as one process on the whole batch would.
void SyncBatchNormImpl::update_running_stats(const torch::Tensor& mean, const torch::Tensor& var,
                                             int64_t count) {
  torch::NoGradGuard no_grad;
  const double factor = count_batch();
  const double unbias = double(count) / double(count - 1);
  running_mean.mul_(1 - factor).add_(mean.to(running_mean.scalar_type()), factor);
  running_var.mul_(1 - factor).add_(var.to(running_var.scalar_type()), factor * unbias);
}

// One rank: the global batch is this rank's, and torch's own kernel does it all.
torch::Tensor SyncBatchNormImpl::local_batch_norm(const torch::Tensor& input) {
  const double factor = options_.track_running_stats() ? count_batch() : 0.0;
  return torch::batch_norm(input, weight, bias, running_mean, running_var, /*training=*/true,
                           factor, options_.eps(), /*cudnn_enabled=*/true);
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& input) {
  COHORT_CHECK(input.dim() >= 2 && input.dim() <= 5,
               "SyncBatchNorm: expected a 2-D to 5-D input "
               "(N, C, ...), got a ",
               input.dim(), "-D input of shape ", input.sizes());
  COHORT_CHECK(input.size(1) == options_.num_features(), "SyncBatchNorm: the input has ",
               input.size(1), " channels (dimension 1 of shape ", input.sizes(),
               ") but the layer was built for ", options_.num_features());
  if (!is_training()) {
    // The running statistics (untracked: this rank's own batch), and no collective.
    return torch::batch_norm(input, weight, bias, running_mean, running_var,
                             /*training=*/!options_.track_running_stats(), 0.0, options_.eps(),
                             /*cudnn_enabled=*/true);
  }
  if (group_->size() == 1) return local_batch_norm(input);
  const detail::GlobalBatchStats stats = detail::global_batch_stats(input, *group_, options_.eps());
  if (options_.track_running_stats()) update_running_stats(stats.mean, stats.var, stats.count);
  return detail::sync_batch_norm(input, weight, bias, stats, group_);
}

}  // namespace cohort::nn
