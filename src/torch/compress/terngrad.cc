// TernGrad (Wen et al., 2017) with one scale per bucket. Each rank sends scale = max|c|
// (float32) and per element t = sign(c) with probability |c| / scale, else 0, as a 2-bit code
// (0: 0, 1: +1, 2: -1) packed 4 to a byte: E[scale * t] = c, unbiased, with variance
// scale * |c| - c^2 <= scale^2 / 4. 4 + ceil(n / 4) bytes per rank, one allgather. On the
// bucket's device, random numbers from a CPU generator (Note [Compression on the device],
// gathered_payloads.h). A zero bucket sends scale 0 and all codes 0; a non-finite one decodes to
// NaN (0 * inf), as QSGD does.
#include <ATen/CPUGeneratorImpl.h>

#include "cohort/torch/compress/quantization.h"
#include "compress/gathered_payloads.h"

namespace cohort {
namespace {

constexpr int kTernaryBits = 2;
constexpr int kPlus = 1;
constexpr int kMinus = 2;

// scale * t for codes in {0, kPlus, kMinus}.
torch::Tensor decode_ternary(const torch::Tensor& codes, const torch::Tensor& scale) {
  return (codes == kPlus)
      .to(torch::kFloat32)
      .sub_((codes == kMinus).to(torch::kFloat32))
      .mul_(scale);
}

}  // namespace

TernGradHook::TernGradHook(TernGradOptions options) : options_(options) {}

PendingReduction TernGradHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  const torch::Tensor c = options_.error_feedback ? compensated(bucket) : bucket.buffer;
  const int64_t n = c.numel();
  const torch::Tensor magnitude = c.abs();
  const torch::Tensor scale = n > 0 ? magnitude.max().reshape({1}) : torch::zeros({1}, c.options());
  auto generator = at::make_generator<at::CPUGeneratorImpl>(
      mix_seed(options_.seed, bucket.iteration, bucket.index, group.rank() + 1));
  const torch::Tensor u = torch::rand({n}, generator, torch::kFloat32).to(c.device());
  // u < |c| / scale: false where that is NaN (0 / 0: a zero bucket; inf / inf).
  const torch::Tensor keep = u < magnitude / scale;
  const torch::Tensor codes =
      torch::where(keep & (c > 0), torch::full_like(c, kPlus),
                   torch::where(keep & (c < 0), torch::full_like(c, kMinus), torch::zeros_like(c)))
          .to(torch::kUInt8);
  if (options_.error_feedback) keep_residual(bucket, c, decode_ternary(codes, scale));
  return allgather_scaled_codes(group, bucket, scale, codes, kTernaryBits, decode_ternary);
}

std::shared_ptr<TernGradHook> terngrad_hook(TernGradOptions options) {
  return std::make_shared<TernGradHook>(options);
}

}  // namespace cohort
