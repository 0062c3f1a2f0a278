// cohort::nn::SyncBatchNorm: batch normalization over the global batch of a data-parallel job,
// for 2-D to 5-D inputs (what BatchNorm1d, 2d and 3d take), on the CPU and on CUDA.
//
//   auto model = std::make_shared<Net>();                       // BatchNorm layers inside
//   model = cohort::nn::convert_sync_batchnorm(model, group);   // before DDP and the optimizer
//   cohort::DistributedDataParallel ddp(model, group);
//
// In training, each rank's forward takes one allreduce of per-channel (count, sum, sum of
// squares), so the statistics are those of the whole global batch, exactly, whatever each
// rank's batch size (0 included); its backward takes one allreduce of the two per-channel
// gradient sums. The running statistics are updated from the global statistics, so they are the
// same on every rank. In eval mode the running statistics are used and nothing is communicated.
// Every rank must run the layer's forward and backward the same number of times, as any
// collective (a rank with no samples still calls forward with a batch of 0).
// docs/large_batch.md, "SyncBatchNorm", has the details and how it interacts with DDP.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "cohort/comm/group.h"

namespace cohort::nn {

namespace detail {
struct BatchNormConversion;  // convert_sync_batchnorm's access to the adopting constructor
}

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  // options as for torch::nn::BatchNorm2d; group: the ranks whose batches form the global batch
  // (usually the DDP group, or a subgroup: the ranks of one node, say). Throws InvalidArgument
  // for a null group or num_features < 1.
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Group> group);

  // Input (N, C), (N, C, L), (N, C, H, W) or (N, C, D, H, W) with C = num_features; float32,
  // float64, bfloat16 or float16 (statistics are computed in float32, or float64 for float64
  // inputs). Collective in training mode (one allreduce here, one in backward).
  torch::Tensor forward(const torch::Tensor& input);

  void reset() override;
  void reset_running_stats();
  void reset_parameters();
  void pretty_print(std::ostream& stream) const override;

  const torch::nn::BatchNormOptions& options() const { return options_; }
  const std::shared_ptr<Group>& group() const { return group_; }
  // Reduces over `group` from the next forward on (a forward already run keeps its group for
  // its backward). cohort::ElasticTrainer calls it with each generation's group; call it
  // yourself only between steps, on every rank. Throws InvalidArgument for a null group.
  void set_group(std::shared_ptr<Group> group);

  // Under the names torch::nn::BatchNorm uses, so state dicts and checkpoints are interchangeable.
  torch::Tensor weight, bias;                                    // undefined unless affine
  torch::Tensor running_mean, running_var, num_batches_tracked;  // undefined unless tracked

 private:
  friend struct detail::BatchNormConversion;
  struct Adopted {  // a BatchNorm's own tensors, registered instead of new ones (conversion)
    torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  };
  SyncBatchNormImpl(const torch::nn::BatchNormOptions& options, std::shared_ptr<Group> group,
                    Adopted adopted);
  torch::Tensor local_batch_norm(const torch::Tensor& input);
  double count_batch();
  void update_running_stats(const torch::Tensor& mean, const torch::Tensor& var, int64_t count);

  torch::nn::BatchNormOptions options_;
  std::shared_ptr<Group> group_;
  Adopted adopted_;  // used by the first reset() only, so that clone() makes fresh tensors
};

TORCH_MODULE(SyncBatchNorm);

// Replaces every torch::nn::BatchNorm1d, 2d and 3d in `module` (the module itself included) by
// a SyncBatchNorm over `group` with the same options, training mode and the very same parameter
// and buffer tensors (so an optimizer already holding them keeps working, and values are kept).
// Returns the module to use: `module` itself, changed in place, or the new layer when `module`
// is a BatchNorm. Call it before wrapping the model in DDP, ZeRO or FSDP.
//
// C++ forwards call the layers they hold: a BatchNorm reached through its parent's list of
// children, a Sequential, a ModuleList or a ModuleDict is replaced there, but one that something
// else also holds (typically a member `torch::nn::BatchNorm2d bn_` that forward() calls) cannot
// be, and would go on normalizing per rank. Such a model is refused with InvalidArgument naming
// the layer, before anything is changed: declare that member as cohort::nn::SyncBatchNorm
// instead, or hold the layer in a Sequential. A ModuleList's or ModuleDict's user must then
// access it as SyncBatchNorm (`list[i]->as<cohort::nn::SyncBatchNorm>()`).
std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          std::shared_ptr<Group> group);

}  // namespace cohort::nn
