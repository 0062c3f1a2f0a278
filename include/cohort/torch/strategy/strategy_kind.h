// The one list of the ways cohort makes a model data parallel. The strategy layer
// (strategy.h) wraps a model under any of them; the planner (plan/planner.h) chooses among
// them; the examples' --strategy and cohort-plan take their names.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort {

enum class ShardingStrategy;  // FullyShardedDataParallel's (cohort/torch/shard/fsdp.h)

enum class StrategyKind {
  // DistributedDataParallel: every rank holds the whole model, gradients averaged in buckets
  // during backward. Local SGD and DiLoCo are ways of synchronizing it (StrategyOptions).
  kDdp,
  kZero1,  // ZeroDataParallel stage 1: the optimizer state sharded
  kZero2,  // ZeroDataParallel stage 2: the gradients too
  // FullyShardedDataParallel with ShardingStrategy kFullShard (parameters sharded too: ZeRO-3),
  // kShardGradOp (a unit stays gathered from its forward to its backward) or kHybridShard
  // (kFullShard inside each node, replicas across nodes).
  kFullShard,
  kShardGradOp,
  kHybridShard,
};

// Every kind, in the order above.
const std::vector<StrategyKind>& all_strategy_kinds();

// "ddp", "zero1", "zero2", "full_shard", "shard_grad_op", "hybrid_shard".
const char* strategy_name(StrategyKind kind);

// The kind of that name (strategy_name's), or nullopt.
std::optional<StrategyKind> strategy_named(const std::string& name);

// The names of `kinds`, comma-separated ("ddp, zero1, ..."): for messages that list them.
std::string strategy_names(const std::vector<StrategyKind>& kinds = all_strategy_kinds());

// ZeroDataParallel's stage 1 or 2; FullyShardedDataParallel's strategies.
bool is_zero(StrategyKind kind);
bool is_fsdp(StrategyKind kind);

// The ShardingStrategy of an FSDP kind (is_fsdp); InvalidArgument for another kind.
ShardingStrategy fsdp_sharding_of(StrategyKind kind);

}  // namespace cohort
