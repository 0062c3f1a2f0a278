// Putting collected pieces (shard_pieces.h) into a rank's holdings: the shards' values, the
// optimizer's state for them, and the whole parameters a wrapper keeps besides its shards
// (ZeRO). Shared by the sharded load (sharded_checkpoint.cc) and ElasticTrainer's re-slicing of
// the pieces its members hold after a membership change (src/torch/elastic/piece_exchange.cc).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "call_sites.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/shard_pieces.h"
#include "cohort/comm/group.h"
#include "rank_holdings.h"

namespace cohort::detail {

// Every rank's [offset, length] of each of its shards, rank after rank (collective).
struct ShardRanges {
  std::vector<int64_t> all;
  size_t count = 0;
  int64_t offset(int rank, size_t shard) const { return all[(rank * count + shard) * 2]; }
  int64_t length(int rank, size_t shard) const { return all[(rank * count + shard) * 2 + 1]; }
};
ShardRanges all_shard_ranges(Group& group, const RankHoldings& holdings, CallSite site);

// Whether the wrapper keeps whole parameters besides its shards (ZeRO).
bool keeps_full_parameters(const RankHoldings& holdings);
// Every rank's shards all-gathered into the whole parameters (full_parameter), one all-gather
// per dtype. Collective.
void gather_full_parameters(Group& group, const RankHoldings& holdings, const ShardRanges& ranges,
                            CallSite site);

// holdings.shards[s] takes the values of collected[first + s].
void restore_shard_values(const RankHoldings& holdings, const std::vector<Collected>& collected,
                          size_t first);
// The optimizer's state for each tensor it holds (a shard of `holdings`) from
// collected[first + s], or none where the pieces had none. The param groups' options are left.
void install_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerCodec& codec,
                             const RankHoldings& holdings, std::vector<Collected>& collected,
                             size_t first);

}  // namespace cohort::detail
