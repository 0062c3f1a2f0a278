// What every gradient-compression hook shares (docs/compression.md): error feedback and the
// per-bucket state that goes with it, and errors that name the hook and the bucket.
//
// Note [Error feedback]
// A compressor sends C(g + e) instead of the gradient g, where e is what earlier steps did not
// send; after the step e becomes (g + e) - C(g + e), this rank's part that did not go out. So
// over steps nothing is lost, only delayed: the sum of what a rank sent plus its residual equals
// the sum of its gradients (Karimireddy et al., 2019, "Error feedback fixes SignSGD"). The
// residual is per rank and per bucket, as large as the bucket, and kept in float32.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "cohort/torch/comm_hook.h"

namespace cohort {

class CompressionHook : public CommHook {
 public:
  // This rank's residual for a bucket (Note [Error feedback]): undefined before the bucket was
  // first compressed, or for a hook without error feedback. A copy, safe to keep.
  torch::Tensor residual(size_t bucket) const;

 protected:
  // gradient + residual(bucket) in a new float32 tensor (the residual is created, as zeros, at
  // the bucket's first use, and again if the bucket's size changed: the rebuild after the
  // first iteration).
  torch::Tensor compensated(const GradBucket& bucket);
  // residual(bucket) = compensated - sent, where sent is this rank's decompressed contribution.
  void keep_residual(const GradBucket& bucket, const torch::Tensor& compensated,
                     const torch::Tensor& sent);
  // Throws InvalidArgument "<name()> hook, bucket <index> (<numel> x <dtype>): <what>".
  [[noreturn]] void fail(const GradBucket& bucket, const std::string& what) const;
  // The bucket must be a float32 tensor (every compressor here works in float32).
  void require_float32(const GradBucket& bucket) const;

 private:
  mutable std::mutex mutex_;  // residuals are written on the autograd thread, read by anyone
  std::map<size_t, torch::Tensor> residuals_;
};

// A seed for random choices that ranks must make alike (Random-K's indices) or differently
// (stochastic rounding), from the hook's seed, the iteration, the bucket and (0 for shared
// choices) the rank: the same arguments give the same seed on every rank and every run.
uint64_t mix_seed(uint64_t seed, int64_t iteration, size_t bucket, int rank_or_zero);

}  // namespace cohort
