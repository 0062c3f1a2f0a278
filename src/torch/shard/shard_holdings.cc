// What ZeroDataParallel's and FullyShardedDataParallel's ranks hold (Note [Rank holdings] in
// rank_holdings.h), for the sharded checkpoints that see them through ShardedParameters.
#include "shard/shard_holdings.h"

#include <unordered_map>
#include <unordered_set>

#include "cohort/core/check.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "shard/fsdp_access.h"

namespace cohort::detail {
namespace {

// Where a ZeRO shard starts in its parameter: shards are views of the parameters' memory
// (zero.h), so the distance between their first elements.
int64_t offset_in(const std::string& name, const torch::Tensor& shard,
                  const torch::Tensor& parameter) {
  if (shard.numel() == 0) return 0;
  const int64_t offset = shard.storage_offset() - parameter.storage_offset();
  COHORT_INTERNAL_ASSERT(shard.is_alias_of(parameter) && shard.dim() == 1 &&
                             parameter.is_contiguous() && offset >= 0 &&
                             offset + shard.numel() <= parameter.numel(),
                         "the ZeRO shard of '", name, "' is not a 1-D view of the parameter");
  return offset;
}

}  // namespace

RankHoldings zero_holdings(const ZeroDataParallel& zero) {
  const auto shards = zero.named_parameters();
  RankHoldings holdings;
  for (const auto& item : zero.module().named_parameters()) {
    const torch::Tensor* tensor = shards.find(item.key());
    if (tensor == nullptr) {  // not trained (frozen): whole on every rank, never stepped
      holdings.unsharded.push_back({item.key(), item.value(), /*buffer=*/false});
      continue;
    }
    ParameterShard shard = describe_parameter(item.key(), item.value());
    shard.offset = offset_in(item.key(), *tensor, item.value());
    shard.length = tensor->numel();
    shard.tensor = *tensor;
    shard.full_parameter = item.value();
    holdings.shards.push_back(std::move(shard));
  }
  COHORT_INTERNAL_ASSERT(holdings.shards.size() == shards.size(),
                         "ZeroDataParallel's shards are not all named parameters of its module");
  add_buffers(zero.module(), holdings);
  return holdings;
}

RankHoldings fsdp_holdings(const FullyShardedDataParallel& fsdp) {
  if (fsdp.strategy() == ShardingStrategy::kNoShard) {
    return replicated_holdings(fsdp.module(), fsdp.group().rank(), fsdp.group().size());
  }
  std::unordered_map<const void*, FsdpParameterPart> part_of;
  for (FsdpParameterPart& part : FsdpAccess::parts(fsdp)) {
    part_of[part.parameter.unsafeGetTensorImpl()] = std::move(part);
  }
  RankHoldings holdings;
  std::unordered_set<const void*> described;
  for (const auto& item : fsdp.module().named_parameters()) {
    const void* impl = item.value().unsafeGetTensorImpl();
    const auto it = part_of.find(impl);
    COHORT_INTERNAL_ASSERT(it != part_of.end(), "the module's parameter '", item.key(),
                           "' is in no FSDP unit");
    const ShardPart& part = it->second.part;
    ParameterShard shard = describe_parameter(item.key(), item.value());
    // What the shard holds: under a 16-bit param_dtype the module's parameter is the gathered
    // 16-bit copy, and the shard its float32 master, which the checkpoint and the pieces carry.
    shard.dtype = part.tensor.scalar_type();
    shard.offset = part.range.parameter_offset;
    shard.length = part.range.length;
    shard.tensor = part.tensor;
    // A parameter registered under a second name (tied weights) is described again with a
    // view of its own: the optimizer's tensor belongs to its first name (shard_names).
    if (!described.insert(impl).second) shard.tensor = part.tensor.view({-1});
    shard.replicas = FsdpAccess::replicas(fsdp);
    shard.replica = FsdpAccess::replica(fsdp);
    holdings.shards.push_back(std::move(shard));
  }
  add_buffers(fsdp.module(), holdings);
  holdings.after_load = [&fsdp] { FsdpAccess::regather(fsdp); };
  return holdings;
}

}  // namespace cohort::detail
