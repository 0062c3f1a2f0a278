#include "cohort/torch/strategy/strategy_kind.h"

#include <array>
#include <utility>

#include "cohort/core/error.h"
#include "cohort/torch/shard/fsdp.h"

namespace cohort {
namespace {

constexpr std::array<std::pair<StrategyKind, const char*>, 6> kNames = {{
    {StrategyKind::kDdp, "ddp"},
    {StrategyKind::kZero1, "zero1"},
    {StrategyKind::kZero2, "zero2"},
    {StrategyKind::kFullShard, "full_shard"},
    {StrategyKind::kShardGradOp, "shard_grad_op"},
    {StrategyKind::kHybridShard, "hybrid_shard"},
}};

}  // namespace

const std::vector<StrategyKind>& all_strategy_kinds() {
  static const std::vector<StrategyKind> kinds = [] {
    std::vector<StrategyKind> out;
    for (const auto& [kind, name] : kNames) out.push_back(kind);
    return out;
  }();
  return kinds;
}

const char* strategy_name(StrategyKind kind) {
  for (const auto& [k, name] : kNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::optional<StrategyKind> strategy_named(const std::string& name) {
  for (const auto& [kind, n] : kNames) {
    if (name == n) return kind;
  }
  return std::nullopt;
}

std::string strategy_names(const std::vector<StrategyKind>& kinds) {
  std::string out;
  for (const StrategyKind kind : kinds)
    out += (out.empty() ? "" : ", ") + std::string(strategy_name(kind));
  return out;
}

bool is_zero(StrategyKind kind) {
  return kind == StrategyKind::kZero1 || kind == StrategyKind::kZero2;
}

bool is_fsdp(StrategyKind kind) {
  return kind == StrategyKind::kFullShard || kind == StrategyKind::kShardGradOp ||
         kind == StrategyKind::kHybridShard;
}

ShardingStrategy fsdp_sharding_of(StrategyKind kind) {
  switch (kind) {
    case StrategyKind::kFullShard: return ShardingStrategy::kFullShard;
    case StrategyKind::kShardGradOp: return ShardingStrategy::kShardGradOp;
    case StrategyKind::kHybridShard: return ShardingStrategy::kHybridShard;
    default:
      throw InvalidArgument(std::string("fsdp_sharding_of: ") + strategy_name(kind) +
                            " is not an FSDP strategy");
  }
}

}  // namespace cohort
