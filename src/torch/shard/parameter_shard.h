// What one rank holds of a model and its optimizer: the internal description that sharded
// checkpoints (sharded_checkpoint.cc) save from and load into, whatever wrapper made it.
//
// Note [Rank holdings]
// A data-parallel wrapper decides which part of each parameter a rank's optimizer steps:
//  - DistributedDataParallel and one process: the whole parameter, the same on every rank
//    (replicated_holdings);
//  - ZeroDataParallel (stages 1 and 2): a 1-D view of [offset, offset + length) of the
//    flattened parameter, a different range on each rank, while the parameter itself stays
//    whole on every rank (zero_holdings);
//  - FullyShardedDataParallel (ZeRO-3, to come): a 1-D range as under ZeRO, but the rank keeps
//    nothing else of the parameter. It adds one function like these (full_parameter left
//    undefined) and one public overload in sharded_checkpoint.h; nothing else changes.
// The checkpoint code sees only RankHoldings: it saves each shard's range of values and of the
// optimizer state kept for `tensor`, and loads any saved ranges back into any other holdings.
// The names are those of the user's module (module.named_parameters() and named_buffers()),
// since the manifest matches by name across wrappers and a gathered save writes the module's
// layout (torch::nn::Module::save) with the gathered values: every parameter and buffer of the
// module must be described, as a shard or as an unsharded tensor, under its own name.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cohort {
class ZeroDataParallel;
}

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
  // Every rank holds the same range with the same values and optimizer state (DDP, one
  // process): a save writes it once, split evenly among the ranks.
  bool replicated = false;
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
};

// DDP and one process: every parameter is a replicated shard holding all of it (the optimizer
// holds the parameters themselves); the buffers are unsharded.
RankHoldings replicated_holdings(const torch::nn::Module& module);

// ZeroDataParallel: each trainable parameter's shard (zero.named_parameters()), with the
// parameter as full_parameter; frozen parameters and buffers are unsharded.
RankHoldings zero_holdings(const ZeroDataParallel& zero);

}  // namespace cohort::detail
