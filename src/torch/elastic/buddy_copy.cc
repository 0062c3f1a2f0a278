#include "elastic/buddy_copy.h"

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

// Fills the start of `packed` (at least packed_gradient_elements of `holdings`) with their
// gradients.
void pack_gradients(const RankHoldings& holdings, const torch::Tensor& packed) {
  float* flags = packed.data_ptr<float>();
  int64_t at = static_cast<int64_t>(holdings.shards.size());
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    const auto& shard = holdings.shards[s];
    const torch::Tensor& grad = shard.tensor.grad();
    flags[s] = grad.defined() ? 1.0F : 0.0F;
    if (grad.defined()) packed.narrow(0, at, shard.length).copy_(grad.detach().reshape({-1}));
    at += shard.length;
  }
}

}  // namespace

BuddyGradients::BuddyGradients(Group& group, const RankHoldings& own) {
  int64_t largest = packed_gradient_elements(own);
  CollectiveOptions options;
  options.site = call_sites::kElasticBuddy;
  options.op = ReduceOp::kMax;
  group.allreduce(Buffer{&largest, 1, DType::kInt64}, options);
  elements_ = largest;
  const auto bytes = static_cast<size_t>(elements_) * sizeof(float);
  memory_ = group.allocate_registered(bytes);
  // The padding is sent too: zeroed once, so that no stale bytes travel.
  outgoing_ = torch::from_blob(memory_->data(), {elements_}, torch::kFloat32).zero_();
}

void BuddyGradients::exchange(Group& group, const RankHoldings& own,
                              const torch::Tensor& incoming) {
  COHORT_INTERNAL_ASSERT(incoming.numel() == elements_, "buddy gradients received into ",
                         incoming.numel(), " elements of ", elements_);
  pack_gradients(own, outgoing_);
  CollectiveOptions options;
  options.site = call_sites::kElasticBuddy;
  group.ring_shift(
      memory_->buffer(memory_->data(), static_cast<size_t>(elements_), DType::kFloat32),
      tensor_buffer(incoming), options);
}

int64_t packed_gradient_elements(const RankHoldings& holdings) {
  int64_t total = static_cast<int64_t>(holdings.shards.size());
  for (const auto& shard : holdings.shards) total += shard.length;
  return total;
}

void unpack_gradients(const torch::Tensor& packed, RankHoldings& holdings) {
  COHORT_INTERNAL_ASSERT(packed.numel() >= packed_gradient_elements(holdings),
                         "a packed gradient of ", packed.numel(), " elements for ",
                         packed_gradient_elements(holdings));
  const auto* defined = packed.data_ptr<float>();
  int64_t at = static_cast<int64_t>(holdings.shards.size());
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    auto& shard = holdings.shards[s];
    torch::Tensor& grad = shard.tensor.mutable_grad();
    if (defined[s] != 0) {
      grad = packed.narrow(0, at, shard.length)
                 .to(shard.tensor.device(), shard.dtype)
                 .view(shard.tensor.sizes());
    } else {
      grad = torch::Tensor();
    }
    at += shard.length;
  }
}

torch::OrderedDict<std::string, torch::Tensor> named_tensors(const HeldPieces& pieces) {
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (const auto& shard : pieces.holdings.shards) named.insert(shard.name, shard.tensor);
  return named;
}

}  // namespace cohort::detail
