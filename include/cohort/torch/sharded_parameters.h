// One view of parameters that a data-parallel wrapper spreads over ranks, for the features that
// cut across wrappers: loss scaling (amp::GradScaler), clipping (cohort::clip_grad_norm), trust
// ratios (optim::shard_norm_reduction) and sharded checkpoints. ZeroDataParallel and
// FullyShardedDataParallel each return one (sharded_parameters(), or convert where a view is
// expected), so each feature is written once, for the view, not once per wrapper:
//
//   cohort::ZeroDataParallel zero(model, group, {.stage = 2});
//   scaler.step(zero, optimizer);                  // the view is made on the way in
//   cohort::clip_grad_norm(zero, 1.0);
//   cohort::save_sharded_checkpoint("ckpt", zero, state);
//
// Note [One view of sharded parameters]
// What the cross-cutting features differ in from wrapper to wrapper is only: which tensors the
// optimizer steps on this rank, over which ranks a sum of per-shard norms makes whole-tensor
// norms, which ranks must agree before any of them steps, how the wrapper steps, and what the
// rank holds for a checkpoint. A view holds exactly that, and refers to the wrapper (the
// groups, the module and the functions point into it): it is valid while the wrapper lives and
// is not moved.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <functional>
#include <vector>

namespace cohort {

class Group;

namespace detail {
struct RankHoldings;  // src/torch/rank_holdings.h
}  // namespace detail

struct ShardedParameters {
  // What the optimizer steps on this rank (the wrapper's parameters()): 1-D shards, or whole
  // parameters where the wrapper does not shard them (FSDP's kNoShard).
  std::vector<torch::Tensor> shards;
  // Every rank of the wrapper.
  Group* group = nullptr;
  // The ranks whose shards together make one whole copy of the parameters, over which a sum of
  // per-shard norms gives whole-tensor norms: ZeRO's group, FSDP's shard_group() (under
  // kHybridShard the other nodes hold replicas of the same shards). Null where `shards` are
  // whole parameters, the same on every rank.
  Group* norm_group = nullptr;
  // The ranks that must agree on a finding before any of them steps (the GradScaler's
  // overflow, seen only by the rank whose shard holds it). Null where the gradients are equal
  // on every rank already (kNoShard, or a group of one).
  Group* flag_group = nullptr;
  // The module the wrapper trains.
  torch::nn::Module* module = nullptr;
  // The wrapper's step(optimizer): steps the shards and brings the parameters up to date.
  std::function<void(torch::optim::Optimizer&)> step;
  // What this rank holds of the model, for sharded checkpoints (Note [Rank holdings]).
  std::function<detail::RankHoldings()> holdings;
};

// The norm of the whole gradient over every rank, clipped in place to max_norm as
// torch::nn::utils::clip_grad_norm_ does in one process; returns the norm before clipping.
// Collective over `sharded.group`; every rank must pass the same max_norm (checked: ConfigError).
double clip_grad_norm(const ShardedParameters& sharded, double max_norm, double norm_type = 2.0);

}  // namespace cohort
