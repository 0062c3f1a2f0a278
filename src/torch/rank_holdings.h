// What one rank holds of a model and its optimizer: the internal description that sharded
// checkpoints (sharded_checkpoint.cc) save from and load into, whatever wrapper made it.
//
// Note [Rank holdings]
// A data-parallel wrapper decides which part of each parameter a rank's optimizer steps:
//  - DistributedDataParallel, FSDP's kNoShard and one process: the whole parameter, the same on
//    every rank (replicated_holdings);
//  - ZeroDataParallel (stages 1 and 2): a 1-D view of [offset, offset + length) of the
//    flattened parameter, a different range on each rank, while the parameter itself stays
//    whole on every rank (zero_holdings);
//  - FullyShardedDataParallel (kFullShard, kShardGradOp): a 1-D range as under ZeRO, cut from
//    the rank's shard of the parameter's unit, and the rank keeps nothing else of the
//    parameter (full_parameter undefined). Frozen parameters are sharded too (a unit shards
//    every parameter it holds), so they are shards the optimizer does not hold. kHybridShard:
//    the same ranges, held by one rank of every node (the replicas), each writing its part of
//    the range so that the save holds it once (fsdp_holdings).
// The checkpoint code sees only RankHoldings: it saves each shard's range of values and of the
// optimizer state kept for `tensor`, and loads any saved ranges back into any other holdings.
// The names are those of the user's module (module.named_parameters() and named_buffers()),
// since the manifest matches by name across wrappers (a tensor saved as a shard may load as an
// unsharded one and back) and a gathered save writes the module's layout
// (torch::nn::Module::save) with the gathered values: every parameter and buffer of the module
// must be described, as a shard or as an unsharded tensor, under its own name.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cohort::detail {

// One parameter as this rank's optimizer holds it.
struct ParameterShard {
  std::string name;            // the parameter's name in module.named_parameters()
  std::vector<int64_t> shape;  // the whole parameter's shape
  torch::ScalarType dtype = torch::kFloat;
  int64_t offset = 0;    // tensor's elements are [offset, offset + length) of the
  int64_t length = 0;    // flattened parameter, in order (length 0: none of it)
  torch::Tensor tensor;  // what the optimizer holds (and its state is kept for): any
                         // shape with `length` elements, sharing the parameter's values
  // How many ranks hold this same range with the same values and optimizer state (DDP and one
  // process: every rank; kHybridShard: one rank per node), and this rank's place among them
  // (0 .. replicas - 1, a different one on each): a save splits the range evenly among them,
  // so that it writes it once (saved_ranges).
  int replicas = 1;
  int replica = 0;
  // The whole parameter where this rank keeps it besides its shard (ZeRO stages 1 and 2): a
  // load all-gathers the ranks' shards into it. Undefined where the rank keeps only the shard
  // (FSDP) or where the shard is the whole parameter (DDP).
  torch::Tensor full_parameter;

  int64_t numel() const;
};

// A tensor every rank keeps whole and no optimizer steps: buffers (BatchNorm's statistics) and
// parameters a wrapper does not shard (frozen ones under ZeRO). Rank 0's is saved, as DDP
// broadcasts rank 0's buffers.
struct UnshardedTensor {
  std::string name;
  torch::Tensor tensor;
  bool buffer = false;
};

// Everything of the model a checkpoint holds for this rank, in the module's order. Every rank
// of a group describes the same parameters and buffers, in the same order.
struct RankHoldings {
  std::vector<ParameterShard> shards;
  std::vector<UnshardedTensor> unsharded;
  // Run by a load on every rank (collective) once the shards hold the loaded values, where the
  // wrapper keeps copies of them that must not go stale (FSDP's gathered units); may be empty.
  std::function<void()> after_load;
};

// DDP and one process: every parameter is a shard holding all of it, replicated on the `world`
// ranks (the optimizer holds the parameters themselves); the buffers are unsharded.
RankHoldings replicated_holdings(const torch::nn::Module& module, int rank = 0, int world = 1);

// The description of one parameter (name, shape, dtype), its range not yet set.
ParameterShard describe_parameter(const std::string& name, const torch::Tensor& parameter);

// Appends the module's buffers, as unsharded tensors.
void add_buffers(const torch::nn::Module& module, RankHoldings& holdings);

}  // namespace cohort::detail
