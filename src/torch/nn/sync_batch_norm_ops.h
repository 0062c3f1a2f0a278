// SyncBatchNorm's arithmetic: the statistics of the global batch (forward's allreduce) and the
// autograd function that normalizes with them and reduces the gradient sums in backward.
// Note [Global statistics] in sync_batch_norm_ops.cc says how they stay exact.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "cohort/comm/group.h"

namespace cohort::nn::detail {

// Per-channel statistics of the whole global batch, in the statistics dtype (float32, or
// float64 for float64 inputs), on the input's device.
struct GlobalBatchStats {
  torch::Tensor mean;
  torch::Tensor var;     // biased (divided by count), as normalization uses
  torch::Tensor invstd;  // 1 / sqrt(var + eps)
  int64_t count = 0;     // values per channel across the group
};

// Collective over `group`: one allreduce of (count, per-channel sums, sums of squares). Throws
// InvalidArgument when the whole group has at most one value per channel, as BatchNorm does
// for one process.
GlobalBatchStats global_batch_stats(const torch::Tensor& input, Group& group, double eps);

// The normalized (and, where defined, scaled and shifted) input; backward allreduces the
// per-channel sums of the gradient and of gradient x centred input over `group` (only when the
// input needs a gradient; every rank agrees, since the models are the same).
torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight,
                              const torch::Tensor& bias, const GlobalBatchStats& stats,
                              std::shared_ptr<Group> group);

}  // namespace cohort::nn::detail
