// ElasticTrainer's sharded strategies (ZeRO-1/2, FULL_SHARD, HYBRID_SHARD): each generation's
// wrapper and optimizer, the pieces this member holds (its own shards and the buddy copy of its
// ring predecessor's, Note [Buddy copies] in buddy_copy.h), and the re-slicing of those pieces into
// the ranges of a new generation (Note [Piece exchange] in piece_exchange.h).
//
// A step under a sharded strategy (Note [Elastic commit] holds as for DDP):
//   zero_grad, forward and backward (the wrapper reduce-scatters the gradients),
//   after_backward: every buddy_refresh_steps steps the buddy copies are refreshed, and the buddy
//     gradients are exchanged (a failure: nothing committed anywhere),
//   the commit vote,
//   commit: the optimizer steps this member's shards, and the buddy gradients join the log,
//   publish: ZeRO all-gathers the updated parameters (a failure here finds the step committed).
#pragma once

#include <cstdint>
#include <memory>

#include "checkpoint/piece_install.h"
#include "cohort/comm/elastic.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "elastic/buddy_copy.h"
#include "elastic/buddy_log.h"
#include "elastic/buddy_refresh.h"
#include "elastic/held_pieces.h"
#include "elastic/piece_exchange.h"

namespace cohort::detail {

class ShardedRun {
 public:
  ShardedRun(std::shared_ptr<torch::nn::Module> module, ElasticOptimizerFactory factory,
             const ElasticTrainerOptions& options);
  ~ShardedRun();

  // A failure (`cause`) broke the generation, or it grows (null): the wrapper goes; the pieces
  // stay, and the gradients of a step whose vote this member did not see end.
  void drop_wrapper(std::exception_ptr cause = nullptr);
  // The new generation over `group`: a step the others committed is caught up, the wrapper and
  // optimizer are built and take their ranges. `committed` and `sampler` move back when a
  // checkpoint is resumed. Collective.
  void adopt(std::shared_ptr<Group> group, const Membership& m, int64_t& committed,
             ElasticSampler& sampler);

  void before_step();
  void after_backward();
  void commit();
  void publish();
  void save_checkpoint(int64_t committed, const ElasticSampler& sampler, const Membership& m);

  torch::optim::Optimizer& optimizer();
  ShardedParameters view();

 private:
  void build_wrapper(std::shared_ptr<Group> group, const Membership& m);
  FsdpOptions generation_fsdp_options(Group& group, const Membership& m) const;
  void catch_up(int64_t target);
  void resume_from_checkpoint(const ExchangePlan& plan, HeldPieces& fresh, int64_t& committed,
                              ElasticSampler& sampler);
  void resume_at_start(HeldPieces& fresh, int64_t& committed, ElasticSampler& sampler);
  void carry_options(HeldPieces& fresh);

  std::shared_ptr<torch::nn::Module> module_;
  ElasticOptimizerFactory factory_;
  const ElasticTrainerOptions& options_;
  FsdpOptions fsdp_options_;  // options_.fsdp, with the sharding of options_.strategy
  std::unique_ptr<ZeroDataParallel> zero_;
  std::unique_ptr<FullyShardedDataParallel> fsdp_;
  std::shared_ptr<Group> group_;
  HeldPieces own_, buddy_;
  BuddyLog log_;              // the steps buddy_ has received and not applied
  BuddyRefresher refresher_;  // the buffers of buddy_'s refreshes
  std::unique_ptr<BuddyGradients> gradients_;  // the buddy gradients' transfer, per generation
  ShardRanges ranges_;        // every member's own ranges (ZeRO's publish)
  bool pending_ = false;      // gradients exchanged, vote not seen through
};

}  // namespace cohort::detail
