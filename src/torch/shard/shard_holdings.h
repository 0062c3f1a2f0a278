// What ZeroDataParallel's and FullyShardedDataParallel's ranks hold (Note [Rank holdings] in
// rank_holdings.h). The wrappers hand these to the checkpoints through ShardedParameters.
#pragma once

#include "rank_holdings.h"

namespace cohort {
class FullyShardedDataParallel;
class ZeroDataParallel;
}  // namespace cohort

namespace cohort::detail {

// ZeroDataParallel: each trainable parameter's shard (zero.named_parameters()), with the
// parameter as full_parameter; frozen parameters and buffers are unsharded.
RankHoldings zero_holdings(const ZeroDataParallel& zero);

// FullyShardedDataParallel: under kNoShard, replicated_holdings; else each parameter's part of
// this rank's shard of its unit (trainable ones: the tensors of fsdp.named_parameters()), with
// the replicas of kHybridShard; buffers are unsharded; after_load gathers again the units that
// are gathered.
RankHoldings fsdp_holdings(const FullyShardedDataParallel& fsdp);

}  // namespace cohort::detail
