// Top-K sparsification (Aji & Heafield, 2017; with error feedback as in Lin et al., 2018, "Deep
// gradient compression"). Each rank encodes the compensated gradient c as the k entries of
// largest |c|: k int32 indices then k float32 values, 8k bytes. One allgather; each rank adds
// every rank's values at their indices (index_add, rank order) and divides by W. On the device
// of the bucket (Note [Compression on the device], gathered_payloads.h).
#include <cstdint>
#include <limits>
#include <tuple>

#include "cohort/torch/compress/sparsification.h"
#include "compress/gathered_payloads.h"
#include "compress/sparse_count.h"

namespace cohort {

TopKHook::TopKHook(TopKOptions options) : options_(options) {
  require_ratio("topk", options_.ratio);
}

PendingReduction TopKHook::start(Group& group, GradBucket& bucket) {
  require_float32(bucket);
  if (bucket.buffer.numel() > std::numeric_limits<int32_t>::max()) {
    fail(bucket,
         "indices travel as int32, and this bucket has more gradients than int32 counts; "
         "lower DdpOptions::bucket_cap_mb, or use random_k_hook (no indices travel)");
  }
  // Without error feedback c is the bucket itself: it is read here, and only overwritten when
  // the allgather has ended.
  const torch::Tensor c = options_.error_feedback ? compensated(bucket) : bucket.buffer;
  const int64_t k = sparse_count(options_.ratio, c.numel());
  const torch::Tensor indices =
      std::get<1>(c.abs().topk(k, /*dim=*/0, /*largest=*/true, /*sorted=*/false));
  const torch::Tensor values = c.index_select(0, indices);
  if (options_.error_feedback) {
    keep_residual(bucket, c, torch::zeros_like(c).index_copy_(0, indices, values));
  }
  auto payload = torch::cat({as_bytes(indices.to(torch::kInt32)), as_bytes(values)});
  const int64_t half = k * 4;
  return allgather_payloads(
      group, bucket, payload, [half](const torch::Tensor& theirs, torch::Tensor& sum) {
        // Both halves start at multiples of 4 inside the gathered tensor (payloads are 8k
        // bytes long), so they can be viewed in place. Not so for an empty bucket's empty
        // payloads (the rows of a {W, 0} tensor are 1 apart): nothing to add.
        if (half == 0) return;
        auto at = bytes_as(theirs.narrow(0, 0, half), torch::kInt32);
        auto their_values = bytes_as(theirs.narrow(0, half, half), torch::kFloat32);
        sum.index_add_(0, at.to(torch::kLong), their_values);
      });
}

std::shared_ptr<TopKHook> top_k_hook(TopKOptions options) {
  return std::make_shared<TopKHook>(options);
}

}  // namespace cohort
