// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): low-rank gradient compression as a
// DDP communication hook, with error feedback and a warm start.
//
//   cohort::PowerSgdOptions o;
//   o.rank = 2;                                  // columns of P and Q
//   ddp_options.comm_hook = cohort::powersgd_hook(o);
//
// Each gradient of two or more dimensions is seen as an n x m matrix M (its first dimension by
// the rest). Instead of M the ranks exchange P = M Q (n x r) and Q = M^T P (m x r): r (n + m)
// numbers instead of n m. One step, after error feedback (compression_hook.h):
//   1. P_i = M_i Q_i for every compressed tensor, with Q_i from the last step (the warm start);
//      one allreduce of every P_i together with the tensors sent whole (below).
//   2. P_i is orthogonalized (QR); Q_i = M_i^T P_i; one allreduce of every Q_i.
//   3. The bucket becomes P_i Q_i^T / world, and the tensors sent whole their average.
// Round 1 overlaps backward as any bucket's allreduce does; round 2 runs when backward ends
// (PendingReduction::finish), bucket by bucket.
// Tensors of one dimension (biases) and matrices too small to gain (below) are sent whole. Up
// to start_iter the hook is a plain allreduce: compression from the first step slows early
// training, and the buckets are rebuilt after the first iteration anyway.
// When it pays: on slow links (docs/compression.md has the measurements); on shared memory or a
// fast network the extra matrix products cost more than the bytes saved.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cohort/torch/compress/compression_hook.h"

namespace cohort {

struct PowerSgdOptions {
  // r: columns of P and Q. Higher is closer to the gradient and sends more. 1 to 4 usually
  // trains as well as allreduce on image models (the paper uses 2 to 4).
  int rank = 2;
  // Iterations (synchronized backwards) reduced with a plain allreduce before compression
  // starts.
  int64_t start_iter = 10;
  // A matrix is compressed only if n m >= min_compression_rate r (n + m); smaller ones are sent
  // whole. 0: compress every matrix (full-rank tests).
  double min_compression_rate = 2;
  // Keep each Q from the last step as the start of the next (one power iteration per step that
  // continues across steps). false: a fresh random Q every step.
  bool warm_start = true;
  bool error_feedback = true;
  // Seed of the random Q at the start (the same on every rank: Q must be).
  uint64_t seed = 0;
};

class PowerSgdHook final : public CompressionHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions options);
  PendingReduction start(Group& group, GradBucket& bucket) override;
  std::string name() const override { return "powersgd"; }
  // Drops every bucket's Q (warm start): the next compressed step draws it from the seed on
  // every member alike, as at the first.
  void on_new_group() override { plans_.clear(); }
  const PowerSgdOptions& options() const { return options_; }

  struct Matrix;      // one compressed tensor of a bucket (powersgd.cc)
  struct BucketPlan;  // which tensors of a bucket are compressed, and their Q

 private:
  // The bucket's plan, made at its first compressed step and again when its size changed.
  std::shared_ptr<BucketPlan> plan_for(const GradBucket& bucket);
  void finish_round_two(Group& group, BucketPlan& plan, GradBucket& bucket,
                        const torch::Tensor& compensated_gradient, const torch::Tensor& round1);

  PowerSgdOptions options_;
  std::shared_ptr<CommHook> allreduce_ = allreduce_hook();  // before start_iter
  std::vector<std::shared_ptr<BucketPlan>> plans_;          // by bucket index
};

std::shared_ptr<PowerSgdHook> powersgd_hook(PowerSgdOptions options = {});

// The rank PowerSGD compresses a gradient seen as a rows x cols matrix at: min(options.rank,
// rows, cols), or 0 where that would not gain (rows cols < min_compression_rate r (rows + cols))
// and the gradient is sent whole. The hook applies it to gradients of two or more dimensions;
// the planner predicts by it (docs/planner.md).
int64_t powersgd_matrix_rank(int64_t rows, int64_t cols, const PowerSgdOptions& options);

}  // namespace cohort
