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
#include <vector>

#include "cohort/torch/ddp/comm_hook.h"

namespace cohort {

class CompressionHook : public CommHook {
 public:
  // This rank's residual for a bucket (Note [Error feedback]): undefined before the bucket was
  // first compressed, or for a hook without error feedback. A copy, safe to keep.
  torch::Tensor residual(size_t bucket) const;

 protected:
  // gradient + residual(bucket) in a new float32 tensor. The residual is created, as zeros, at
  // the bucket's first use, and again if the bucket now holds other parameters or holds them in
  // another order (DDP's rebuild after the first iteration): iteration 0's residual is dropped
  // then, the only one that is.
  torch::Tensor compensated(const GradBucket& bucket);
  // residual(bucket) = compensated - sent, where sent is this rank's decompressed contribution.
  // A residual that is not finite (an inf or NaN gradient: an overflow the GradScaler skips)
  // is dropped instead of being carried into every later step.
  void keep_residual(const GradBucket& bucket, const torch::Tensor& compensated,
                     const torch::Tensor& sent);
  // The bucket's parameters in order, as identities: two layouts of one bucket index differ
  // here when the bucket was rebuilt, even at the same size.
  static std::vector<const void*> layout_of(const GradBucket& bucket);
  // Throws InvalidArgument "<name()> hook, bucket <index> (<numel> x <dtype>): <what>".
  [[noreturn]] void fail(const GradBucket& bucket, const std::string& what) const;
  // The bucket must be a float32 tensor (every compressor here works in float32).
  void require_float32(const GradBucket& bucket) const;

 private:
  struct Residual {
    torch::Tensor values;
    std::vector<const void*> layout;  // layout_of() the bucket it belongs to
  };
  mutable std::mutex mutex_;  // residuals are written on the autograd thread, read by anyone
  std::map<size_t, Residual> residuals_;
};

// A seed for random choices that ranks must make alike (Random-K's indices) or differently
// (stochastic rounding), from the hook's seed, the iteration, the bucket and (0 for shared
// choices) the rank: the same arguments give the same seed on every rank and every run.
uint64_t mix_seed(uint64_t seed, int64_t iteration, size_t bucket, int rank_or_zero);

}  // namespace cohort
