#include "rank_holdings.h"

namespace cohort::detail {

ParameterShard describe_parameter(const std::string& name, const torch::Tensor& parameter) {
  ParameterShard shard;
  shard.name = name;
  shard.shape = parameter.sizes().vec();
  shard.dtype = parameter.scalar_type();
  return shard;
}

void add_buffers(const torch::nn::Module& module, RankHoldings& holdings) {
  for (const auto& item : module.named_buffers()) {
    holdings.unsharded.push_back({item.key(), item.value(), /*buffer=*/true});
  }
}

int64_t ParameterShard::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

RankHoldings replicated_holdings(const torch::nn::Module& module, int rank, int world) {
  RankHoldings holdings;
  for (const auto& item : module.named_parameters()) {
    ParameterShard shard = describe_parameter(item.key(), item.value());
    shard.length = item.value().numel();
    shard.tensor = item.value();
    shard.replicas = world;
    shard.replica = rank;
    holdings.shards.push_back(std::move(shard));
  }
  add_buffers(module, holdings);
  return holdings;
}

}  // namespace cohort::detail
