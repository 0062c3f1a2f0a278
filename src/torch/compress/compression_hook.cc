#include "cohort/torch/compress/compression_hook.h"

#include "cohort/core/error.h"

namespace cohort {

torch::Tensor CompressionHook::residual(size_t bucket) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = residuals_.find(bucket);
  return it == residuals_.end() ? torch::Tensor() : it->second.values.clone();
}

std::vector<const void*> CompressionHook::layout_of(const GradBucket& bucket) {
  std::vector<const void*> layout;
  for (const auto& parameter : bucket.parameters) layout.push_back(parameter.unsafeGetTensorImpl());
  return layout;
}

torch::Tensor CompressionHook::compensated(const GradBucket& bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  Residual& residual = residuals_[bucket.index];
  auto layout = layout_of(bucket);
  if (!residual.values.defined() || residual.values.numel() != bucket.buffer.numel() ||
      residual.layout != layout) {
    residual.values =
        torch::zeros({bucket.buffer.numel()}, bucket.buffer.options().dtype(torch::kFloat32));
    residual.layout = std::move(layout);
  }
  return bucket.buffer.to(torch::kFloat32) + residual.values;
}

void CompressionHook::keep_residual(const GradBucket& bucket, const torch::Tensor& compensated,
                                    const torch::Tensor& sent) {
  std::lock_guard<std::mutex> lock(mutex_);
  torch::Tensor& residual = residuals_[bucket.index].values;
  torch::sub_out(residual, compensated, sent);
  if (!torch::isfinite(residual).all().item<bool>()) residual.zero_();
}

void CompressionHook::fail(const GradBucket& bucket, const std::string& what) const {
  throw InvalidArgument(name() + " hook, bucket " + std::to_string(bucket.index) + " (" +
                        std::to_string(bucket.buffer.numel()) + " x " +
                        std::string(c10::toString(bucket.buffer.scalar_type())) + "): " + what);
}

void CompressionHook::require_float32(const GradBucket& bucket) const {
  if (bucket.buffer.scalar_type() == torch::kFloat32) return;
  fail(bucket,
       "gradients of this dtype are not compressed; this hook takes float32 buckets: keep the "
       "model in float32 (autocast computes in 16-bit without changing the parameters), or "
       "for a 16-bit model use fp16_compress_hook() or float32_reduction_hook()");
}

uint64_t mix_seed(uint64_t seed, int64_t iteration, size_t bucket, int rank_or_zero) {
  // splitmix64 over the fields in turn: cheap, and neighbouring inputs give unrelated seeds.
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  };
  uint64_t h = mix(seed);
  h = mix(h ^ static_cast<uint64_t>(iteration));
  h = mix(h ^ static_cast<uint64_t>(bucket));
  return mix(h ^ static_cast<uint64_t>(rank_or_zero));
}

}  // namespace cohort
