#include "elastic/buddy_copy.h"

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

// Fills `packed` (packed_gradient_elements of `holdings`) with their gradients.
void pack_gradients(const RankHoldings& holdings, torch::Tensor& packed) {
  const int64_t elements = packed_gradient_elements(holdings);
  if (!packed.defined() || packed.numel() != elements) packed = torch::empty({elements});
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

void shift_around_ring(Group& group, const std::function<void(int successor)>& send_to_successor,
                       const std::function<void(int predecessor)>& receive_from_predecessor) {
  const int world = group.size();
  if (world == 1) return;
  const int successor = (group.rank() + 1) % world;
  const int predecessor = (group.rank() + world - 1) % world;
  if (group.rank() % 2 == 0) {
    send_to_successor(successor);
    receive_from_predecessor(predecessor);
  } else {
    receive_from_predecessor(predecessor);
    send_to_successor(successor);
  }
}

void exchange_buddy_gradients(Group& group, const HeldPieces& own, torch::Tensor& outgoing,
                              const torch::Tensor& incoming) {
  CollectiveOptions options;
  options.site = call_sites::kElasticBuddy;
  pack_gradients(own.holdings, outgoing);
  shift_around_ring(
      group, [&](int successor) { group.send(tensor_buffer(outgoing), successor, options); },
      [&](int predecessor) { group.recv(tensor_buffer(incoming), predecessor, options); });
}

int64_t packed_gradient_elements(const RankHoldings& holdings) {
  int64_t total = static_cast<int64_t>(holdings.shards.size());
  for (const auto& shard : holdings.shards) total += shard.length;
  return total;
}

void unpack_gradients(const torch::Tensor& packed, RankHoldings& holdings) {
  COHORT_INTERNAL_ASSERT(packed.numel() == packed_gradient_elements(holdings),
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
