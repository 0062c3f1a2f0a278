// QSGD (Alistarh et al., 2017) with one norm per bucket. Each rank sends ||c||_2 (float32) and,
// per element, l = sign(c) * (floor(x) or floor(x) + 1) in int8, where x = |c| / ||c|| * s and
// the upper level is taken with probability x - floor(x): E[l] = c / ||c|| * s, so the decoded
// ||c|| * l / s is unbiased, and its variance is ||c||^2 / s^2 * p (1 - p) <= ||c||^2 / (4 s^2).
// 4 + n bytes per rank, one allgather. On the bucket's device, random numbers from a CPU
// generator (Note [Compression on the device], gathered_payloads.h).
//
// A non-finite gradient makes the norm inf or NaN and every level 0, so the bucket decodes to
// NaN everywhere (0 * inf): the step is visibly bad (a GradScaler skips it) instead of silently
// zero.
#include <ATen/CPUGeneratorImpl.h>

#include "cohort/core/error.h"
#include "cohort/torch/compress/quantization.h"
#include "compress/gathered_payloads.h"

namespace cohort {
namespace {

// The value levels stand for: norm * level / s (the same expression for what this rank sent
// and for what every rank decodes).
torch::Tensor dequantize(const torch::Tensor& levels, const torch::Tensor& norm, int s) {
  return levels.to(torch::kFloat32).mul_(norm).div_(s);
}

}  // namespace

QsgdHook::QsgdHook(QsgdOptions options) : options_(options) {
  if (options_.levels >= 1 && options_.levels <= 127) return;
  throw InvalidArgument("qsgd hook: levels " + std::to_string(options_.levels) +
                        " is outside 1..127; levels are kept in int8 with their sign (16 is "
                        "the usual choice, more lowers the variance at the same wire size)");
}

PendingReduction QsgdHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  const torch::Tensor c = options_.error_feedback ? compensated(bucket) : bucket.buffer;
  const int64_t n = c.numel();
  const int s = options_.levels;
  const torch::Tensor norm = c.norm().reshape({1});
  auto generator = at::make_generator<at::CPUGeneratorImpl>(
      mix_seed(options_.seed, bucket.iteration, bucket.index, group.rank() + 1));
  const torch::Tensor u = torch::rand({n}, generator, torch::kFloat32).to(c.device());
  // x in [0, s]; 0 / 0 (a zero bucket) and inf / inf are NaN, made 0; rounding of the norm
  // could push x a hair above s, hence the clamp.
  const torch::Tensor x =
      torch::nan_to_num(c.abs().div_(norm).mul_(s), 0.0, static_cast<double>(s), 0.0).clamp_(0, s);
  torch::Tensor level = x.floor();
  level.add_((u < x - level).to(torch::kFloat32)).clamp_max_(s);
  const torch::Tensor levels = torch::where(c < 0, -level, level).to(torch::kInt8);
  if (options_.error_feedback) keep_residual(bucket, c, dequantize(levels, norm, s));
  auto payload = torch::cat({as_bytes(norm), as_bytes(levels)});
  return allgather_payloads(group, bucket, payload,
                            [n, s](const torch::Tensor& theirs, torch::Tensor& sum) {
                              auto their_levels = bytes_as(theirs.narrow(0, 4, n), torch::kInt8);
                              sum.add_(dequantize(their_levels, float_at(theirs, 0), s));
                            });
}

std::shared_ptr<QsgdHook> qsgd_hook(QsgdOptions options) {
  return std::make_shared<QsgdHook>(options);
}

}  // namespace cohort
