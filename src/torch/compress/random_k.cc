// Random-K sparsification (Stich et al., 2018, "Sparsified SGD with memory"). The k indices are
// a prefix of a random permutation drawn from a CPU generator seeded with (seed, iteration,
// bucket), the same on every rank, so only the values travel: one allreduce (average) of k
// float32. The bucket becomes the averaged values at those indices and 0 elsewhere. Values and
// scattering on the bucket's device; the permutation on the CPU, copied over (Note [Compression
// on the device], gathered_payloads.h).
#include <ATen/CPUGeneratorImpl.h>

#include <utility>

#include "call_sites.h"
#include "cohort/torch/compress/sparsification.h"
#include "cohort/torch/tensor_buffer.h"
#include "compress/sparse_count.h"

namespace cohort {

RandomKHook::RandomKHook(RandomKOptions options) : options_(options) {
  require_ratio("randomk", options_.ratio);
}

PendingReduction RandomKHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  const torch::Tensor c = options_.error_feedback ? compensated(bucket) : bucket.buffer;
  const int64_t n = c.numel();
  const int64_t k = sparse_count(options_.ratio, n);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(
      mix_seed(options_.seed, bucket.iteration, bucket.index, 0));
  const torch::Tensor indices =
      torch::randperm(n, generator, torch::kLong).narrow(0, 0, k).to(c.device());
  torch::Tensor values = c.index_select(0, indices);  // a new tensor: the allreduce's
  if (options_.error_feedback) {
    // No n / k scaling here: error feedback already keeps what was not sent, in the residual,
    // and sends it later. Scaled values would send more than c holds, and the residual at the
    // chosen indices would become -(n / k - 1) c: an overshoot each later step must undo, which
    // grows with n / k instead of vanishing.
    keep_residual(bucket, c, torch::zeros_like(c).index_copy_(0, indices, values));
  } else {
    // Each index is chosen with probability k / n: scaled by n / k the estimate is unbiased.
    values.mul_(static_cast<double>(n) / static_cast<double>(k));
  }
  CollectiveOptions options;
  options.op = ReduceOp::kAvg;
  options.site = call_sites::kDdpGradients;
  options.stream = current_stream(values);
  auto work = group.allreduce_async(tensor_buffer(values), options);
  auto target = bucket.buffer;
  auto finish = [target, indices, values]() mutable {
    target.zero_().index_copy_(0, indices, values);
  };
  return {std::move(work), std::move(finish), values, static_cast<size_t>(values.nbytes())};
}

std::shared_ptr<RandomKHook> random_k_hook(RandomKOptions options) {
  return std::make_shared<RandomKHook>(options);
}

}  // namespace cohort
