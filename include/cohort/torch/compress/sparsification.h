// Sparsifying gradient-compression hooks: each rank sends only k of a bucket's n gradients
// (k = max(1, ceil(ratio * n))), and error feedback (Note [Error feedback],
// compression_hook.h) carries what was not sent into the next step. docs/compression.md.
//
//   ddp_options.comm_hook = cohort::top_k_hook({/*ratio=*/0.01});
//
// Every rank of a group needs its own hook object (the residuals are this rank's).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cohort/torch/compress/compression_hook.h"

namespace cohort {

// k of a bucket of n gradients: max(1, ceil(ratio * n)), at most n (0 for an empty bucket).
// A product that is an integer up to rounding (0.07 * 100) counts as that integer.
int64_t sparse_count(double ratio, int64_t numel);

struct TopKOptions {
  double ratio = 0.01;  // of each bucket's gradients sent, in (0, 1]
  bool error_feedback = true;
};

// Sends the k largest |gradient + residual| as k int32 indices and k float32 values: 8k bytes
// per rank in one allgather. Pays where bandwidth bounds the step and ratio < 1 / W (a ring
// allgather sends (W - 1) 8k per rank, an allreduce of the bucket 8n (W - 1) / W).
class TopKHook : public CompressionHook {
 public:
  // Throws InvalidArgument naming the hook for a ratio outside (0, 1].
  explicit TopKHook(TopKOptions options = {});
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "topk"; }
  const TopKOptions& options() const { return options_; }

 private:
  TopKOptions options_;
};
std::shared_ptr<TopKHook> top_k_hook(TopKOptions options = {});

struct RandomKOptions {
  double ratio = 0.01;  // of each bucket's gradients sent, in (0, 1]
  uint64_t seed = 0;    // the same on every rank: it chooses the indices
  bool error_feedback = true;
};

// Sends k entries at indices drawn alike on every rank, so only the k float32 values travel, in
// one allreduce: ratio x the bytes of a plain allreduce at any W (where Top-K's allgather grows
// with W). Ignores magnitudes, so it needs error feedback or more steps to converge.
class RandomKHook : public CompressionHook {
 public:
  // Throws InvalidArgument naming the hook for a ratio outside (0, 1].
  explicit RandomKHook(RandomKOptions options = {});
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "randomk"; }
  const RandomKOptions& options() const { return options_; }

 private:
  RandomKOptions options_;
};
std::shared_ptr<RandomKHook> random_k_hook(RandomKOptions options = {});

}  // namespace cohort
