#include "checkpoint/piece_install.h"

#include <algorithm>
#include <unordered_map>

#include "checkpoint/sharded_common.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

// The shards of `dtype`: each rank's packed end to end, padded to the longest rank's, one
// all-gather, and each piece copied to its place in the full parameter.
void gather_full_parameters_of(Group& group, const RankHoldings& holdings,
                               const ShardRanges& ranges, torch::ScalarType dtype, CallSite site) {
  const auto& shards = holdings.shards;
  int64_t longest = 0;
  for (int r = 0; r < group.size(); ++r) {
    int64_t total = 0;
    for (size_t s = 0; s < shards.size(); ++s) {
      if (shards[s].dtype == dtype) total += ranges.length(r, s);
    }
    longest = std::max(longest, total);
  }
  if (longest == 0) return;
  torch::Tensor packed = torch::zeros({longest}, torch::TensorOptions(dtype));
  int64_t at = 0;
  for (const ParameterShard& shard : shards) {
    if (shard.dtype != dtype || shard.length == 0) continue;
    packed.narrow(0, at, shard.length).copy_(shard.tensor.detach().reshape({-1}));
    at += shard.length;
  }
  torch::Tensor gathered = torch::empty({longest * group.size()}, packed.options());
  CollectiveOptions options;
  options.site = site;
  group.allgather(tensor_buffer(packed), tensor_buffer(gathered), options);
  for (int r = 0; r < group.size(); ++r) {
    int64_t from = r * longest;
    for (size_t s = 0; s < shards.size(); ++s) {
      const int64_t length = ranges.length(r, s);
      if (shards[s].dtype != dtype || length == 0) continue;
      shards[s]
          .full_parameter.detach()
          .view({-1})
          .narrow(0, ranges.offset(r, s), length)
          .copy_(gathered.narrow(0, from, length));
      from += length;
    }
  }
}

}  // namespace

ShardRanges all_shard_ranges(Group& group, const RankHoldings& holdings, CallSite site) {
  std::vector<int64_t> mine;
  for (const ParameterShard& shard : holdings.shards) {
    mine.push_back(shard.offset);
    mine.push_back(shard.length);
  }
  return ShardRanges{allgather_rows(group, mine, site), holdings.shards.size()};
}

bool keeps_full_parameters(const RankHoldings& holdings) {
  for (const ParameterShard& shard : holdings.shards) {
    if (shard.full_parameter.defined()) return true;
  }
  return false;
}

void gather_full_parameters(Group& group, const RankHoldings& holdings, const ShardRanges& ranges,
                            CallSite site) {
  std::vector<torch::ScalarType> dtypes;
  for (const ParameterShard& shard : holdings.shards) {
    if (std::find(dtypes.begin(), dtypes.end(), shard.dtype) == dtypes.end()) {
      dtypes.push_back(shard.dtype);
    }
  }
  torch::NoGradGuard no_grad;
  for (torch::ScalarType dtype : dtypes) {
    gather_full_parameters_of(group, holdings, ranges, dtype, site);
  }
}

void restore_shard_values(const RankHoldings& holdings, const std::vector<Collected>& collected,
                          size_t first) {
  torch::NoGradGuard no_grad;
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    const ParameterShard& shard = holdings.shards[s];
    if (shard.length == 0) continue;
    shard.tensor.detach().copy_(collected[first + s].values.view(shard.tensor.sizes()));
  }
}

void install_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerCodec& codec,
                             const RankHoldings& holdings, std::vector<Collected>& collected,
                             size_t first) {
  std::unordered_map<const void*, size_t> index;
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    index[holdings.shards[s].tensor.unsafeGetTensorImpl()] = s;
  }
  for (auto& group : optimizer.param_groups()) {
    for (const auto& tensor : group.params()) {
      Collected& saved = collected[first + index.at(tensor.unsafeGetTensorImpl())];
      std::unique_ptr<torch::optim::OptimizerParamState> state;
      if (saved.has_state) {
        for (auto& [name, field] : saved.state.fields) {
          field = field.view(tensor.sizes()).to(tensor.device());
        }
        state = codec.make_state(saved.state);
      }
      set_state_of(optimizer, tensor, std::move(state));
    }
  }
}

}  // namespace cohort::detail
