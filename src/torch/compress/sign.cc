// 1-bit compression with a scale, EF-SignSGD (Karimireddy et al., 2019). Each rank sends
// scale = mean |c| (float32) and one bit per element, 1 for c >= 0 (the sign of 0 is +), packed
// 8 to a byte: this rank's contribution is scale * (+1 or -1). 4 + ceil(n / 8) bytes per rank,
// one allgather. Biased: error feedback (on by default) is what makes it converge. On the
// bucket's device (Note [Compression on the device], gathered_payloads.h).
#include "cohort/torch/compress/quantization.h"
#include "compress/gathered_payloads.h"

namespace cohort {
namespace {

constexpr int kSignBits = 1;

// scale * (2 bit - 1).
torch::Tensor decode_signs(const torch::Tensor& bits, const torch::Tensor& scale) {
  return bits.to(torch::kFloat32).mul_(2).sub_(1).mul_(scale);
}

}  // namespace

SignHook::SignHook(SignOptions options) : options_(options) {}

PendingReduction SignHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  const torch::Tensor c = options_.error_feedback ? compensated(bucket) : bucket.buffer;
  const int64_t n = c.numel();
  const torch::Tensor scale = n > 0 ? c.abs().mean().reshape({1}) : torch::zeros({1}, c.options());
  const torch::Tensor bits = (c >= 0).to(torch::kUInt8);  // NaN: 0, but the scale is NaN then
  if (options_.error_feedback) keep_residual(bucket, c, decode_signs(bits, scale));
  return allgather_scaled_codes(group, bucket, scale, bits, kSignBits, decode_signs);
}

std::shared_ptr<SignHook> sign_hook(SignOptions options) {
  return std::make_shared<SignHook>(options);
}

}  // namespace cohort
