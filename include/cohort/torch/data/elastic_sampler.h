// cohort::ElasticSampler: a data set's epoch shared out step by step among however many ranks a
// step has, so that an elastic job (docs/elastic.md) sees every sample of an epoch exactly once
// across its committed steps, whatever members leave or join in between.
//
// Each epoch is one permutation of 0..N-1 (the same shuffle as DistributedSampler's: seed,
// epoch). The sampler keeps the position up to which committed steps have consumed it. A step
// at world size W takes the next `step_samples(W)` positions and gives rank r the positions
// r, r + W, r + 2W, ... of them: at a fixed W this is exactly DistributedSampler's split, one
// batch at a time. A step that fails is not committed, so its positions are handed out again,
// among the members of the next generation.
//
//   cohort::ElasticSampler sampler(dataset_size, {.batch_per_rank = 32, .seed = 1});
//   auto mine = sampler.step_indices(group.rank(), group.size());   // this step's samples
//   ... forward, backward, commit ...
//   sampler.advance(group.size());                                   // after a committed step
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cohort {

struct ElasticSamplerOptions {
  // How a step's samples follow the world size (docs/elastic.md, "Batch size"):
  // batch_per_rank > 0: every rank takes batch_per_rank samples, so the global batch grows and
  //   shrinks with the world (rescale the learning rate in ElasticTrainer's membership callback,
  //   e.g. with cohort::optim's linear scaling rule);
  // global_batch > 0 (and batch_per_rank 0): the global batch stays, and each rank's share grows
  //   when members leave (shares differ by at most one sample).
  size_t batch_per_rank = 0;
  size_t global_batch = 0;
  bool shuffle = true;
  uint64_t seed = 0;
};

class ElasticSampler {
 public:
  // Throws InvalidArgument unless exactly one of batch_per_rank and global_batch is set.
  ElasticSampler(size_t dataset_size, ElasticSamplerOptions options);

  // Samples the next step takes at world size `world_size`: the whole global batch, or what is
  // left of the epoch. An epoch's last step runs with fewer samples; a tail of fewer samples
  // than ranks cannot give every rank one, so it is skipped (counted in skipped()).
  size_t step_samples(int world_size) const;
  // The data set indices rank `rank` of `world_size` takes in the next step (not empty).
  std::vector<size_t> step_indices(int rank, int world_size) const;
  // After a committed step at `world_size`: moves past its samples, and into the next epoch
  // when this one is used up. Returns whether a new epoch began.
  bool advance(int world_size);
  // Before a step at `world_size`: when fewer samples than ranks are left of the epoch, skips
  // them and begins the next epoch (returns true). step_samples and step_indices need it done.
  bool skip_small_tail(int world_size);

  uint64_t epoch() const { return epoch_; }
  // Positions of this epoch's permutation consumed by committed steps.
  size_t position() const { return position_; }
  // Samples of past epochs left out as tails smaller than the world.
  size_t skipped() const { return skipped_; }
  size_t dataset_size() const { return order_.size(); }
  const ElasticSamplerOptions& options() const { return options_; }
  // The epoch's permutation (position p holds the data set index order()[p]).
  const std::vector<size_t>& order() const { return order_; }

  // Moves to `epoch` at `position` (what a healing member receives from the others).
  void restore(uint64_t epoch, size_t position, size_t skipped);

 private:
  void begin_epoch(uint64_t epoch);

  ElasticSamplerOptions options_;
  uint64_t epoch_ = 0;
  size_t position_ = 0;
  size_t skipped_ = 0;
  std::vector<size_t> order_;
};

}  // namespace cohort
