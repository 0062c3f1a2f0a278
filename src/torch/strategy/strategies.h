// The strategies behind make_strategy (strategy.cc), one file each: ddp_strategy.cc (DDP with
// master weights, local SGD and DiLoCo), sharded_strategy.cc (ZeRO stages 1 and 2, FSDP).
#pragma once

#include <memory>

#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "cohort/torch/strategy/strategy.h"

namespace cohort::strategy_detail {

std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<torch::nn::Module> model,
                                            std::shared_ptr<Group> group,
                                            const StrategyOptions& options);
std::unique_ptr<Strategy> make_sharded_strategy(StrategyKind kind,
                                                std::shared_ptr<torch::nn::Module> model,
                                                std::shared_ptr<Group> group,
                                                const StrategyOptions& options);

// DDP's options as both DDP and ZeRO take them (buckets, timeline, the comm hook).
DdpOptions ddp_options(const StrategyOptions& options);

// ZeroDataParallel's options for kZero1 or kZero2 (sharded_strategy.cc).
ZeroOptions zero_options(StrategyKind kind, const StrategyOptions& options);

// FullyShardedDataParallel's options for an FSDP kind; under master weights (`precision`) the
// units are 16-bit and their float32 shards the masters.
FsdpOptions fsdp_options(StrategyKind kind, const StrategyOptions& options,
                         const Precision& precision);

// What a step communicated, from a wrapper's IterationStats.
StepCommunication communication_of(const IterationStats& stats);

}  // namespace cohort::strategy_detail
