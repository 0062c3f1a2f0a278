#include "elastic/buddy_copy.h"

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

// One float per tensor (1: its gradient is defined), then the gradients end to end.
torch::Tensor pack_gradients(const RankHoldings& holdings) {
  int64_t total = static_cast<int64_t>(holdings.shards.size());
  for (const auto& shard : holdings.shards) total += shard.length;
  auto packed = torch::zeros({total}, torch::kFloat);
  int64_t at = static_cast<int64_t>(holdings.shards.size());
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    const auto& shard = holdings.shards[s];
    const torch::Tensor& grad = shard.tensor.grad();
    if (grad.defined()) {
      packed[static_cast<int64_t>(s)] = 1;
      packed.narrow(0, at, shard.length).copy_(grad.detach().reshape({-1}));
    }
    at += shard.length;
  }
  return packed;
}

void unpack_gradients(const torch::Tensor& packed, RankHoldings& holdings) {
  const auto* defined = packed.data_ptr<float>();
  int64_t at = static_cast<int64_t>(holdings.shards.size());
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    auto& shard = holdings.shards[s];
    torch::Tensor& grad = shard.tensor.mutable_grad();
    if (defined[s] != 0) {
      grad = packed.narrow(0, at, shard.length).to(shard.dtype).view(shard.tensor.sizes());
    } else {
      grad = torch::Tensor();
    }
    at += shard.length;
  }
}

}  // namespace

void exchange_buddy_gradients(Group& group, const HeldPieces& own, HeldPieces& buddy) {
  const int world = group.size();
  if (world == 1) return;
  CollectiveOptions options;
  options.site = call_sites::kElasticBuddy;
  torch::Tensor out = pack_gradients(own.holdings);
  int64_t expected = static_cast<int64_t>(buddy.holdings.shards.size());
  for (const auto& shard : buddy.holdings.shards) expected += shard.length;
  torch::Tensor in = torch::empty({expected}, torch::kFloat);
  const int successor = (group.rank() + 1) % world;
  const int predecessor = (group.rank() + world - 1) % world;
  // A ring of blocking pairs: even ranks send first, odd ones receive first, so that no cycle
  // of ranks waits on one another (with W odd, ranks 0 and W - 1 are both even).
  if (group.rank() % 2 == 0) {
    group.send(tensor_buffer(out), successor, options);
    group.recv(tensor_buffer(in), predecessor, options);
  } else {
    group.recv(tensor_buffer(in), predecessor, options);
    group.send(tensor_buffer(out), successor, options);
  }
  unpack_gradients(in, buddy.holdings);
}

torch::OrderedDict<std::string, torch::Tensor> named_tensors(const HeldPieces& pieces) {
  torch::OrderedDict<std::string, torch::Tensor> named;
  for (const auto& shard : pieces.holdings.shards) named.insert(shard.name, shard.tensor);
  return named;
}

}  // namespace cohort::detail
