// cohort::DistributedSampler: gives each rank a disjoint shard of a dataset's indices, so that
// together the ranks cover the data set once per epoch, and every rank gets the same number of
// samples (so every rank runs the same number of steps and no collective is left unmatched).
//
//   cohort::DistributedSamplerOptions options;
//   options.seed = 42;
//   cohort::DistributedSampler sampler(dataset.size().value(), *group, options);
//   auto loader = torch::data::make_data_loader(dataset, sampler, batch_per_rank);
//   for (uint64_t epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);              // a new shuffle, the same on every rank
//     for (auto& batch : *loader) { ... }
//   }
//
// make_data_loader keeps a copy of the sampler; copies share their epoch and position, so
// set_epoch() on `sampler` reaches the loader's copy. The loader calls reset() at begin(),
// which starts the epoch over, except right after set_position() or load(): then it resumes
// from that position (a run restarted from a checkpoint continues mid-epoch).
//
// Each epoch the indices 0..N-1 are shuffled with a generator seeded from (seed, epoch), the
// same permutation on every rank; rank r takes positions r, r + W, r + 2W, ... of it. When N is
// not a multiple of W the permutation is padded by repeating its first indices (default) or
// truncated (drop_last), as PyTorch's DistributedSampler does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace cohort {

class Group;

struct DistributedSamplerOptions {
  // Shuffle every epoch. Off: rank r takes r, r + W, ... of 0..N-1 in order.
  bool shuffle = true;
  // Seed of the shuffle; must be the same on every rank.
  uint64_t seed = 0;
  // Drop the tail that does not divide evenly among the ranks instead of padding it.
  bool drop_last = false;
};

class DistributedSampler : public torch::data::samplers::Sampler<std::vector<size_t>> {
 public:
  // Throws InvalidArgument for world_size < 1, rank outside [0, world_size), or drop_last with
  // fewer samples than ranks.
  DistributedSampler(size_t dataset_size, int rank, int world_size,
                     DistributedSamplerOptions options = {});
  // Takes rank and world size from the group.
  DistributedSampler(size_t dataset_size, const Group& group,
                     DistributedSamplerOptions options = {});

  // Selects the epoch's shuffle and starts the epoch from its beginning. Call it with the same
  // value on every rank before each epoch.
  void set_epoch(uint64_t epoch);
  uint64_t epoch() const { return state_->epoch; }

  // What the sampler was built for (the data set size follows reset(new_size)).
  size_t dataset_size() const { return state_->dataset_size; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  const DistributedSamplerOptions& options() const { return options_; }

  // Samples this rank sees per epoch (the same on every rank).
  size_t num_samples() const { return state_->indices.size(); }
  // This rank's indices for the current epoch, in the order next() hands them out.
  const std::vector<size_t>& indices() const { return state_->indices; }
  // How many of this epoch's indices were handed out; a checkpoint stores it so a resumed run
  // continues mid-epoch. set_position throws InvalidArgument past num_samples().
  size_t position() const { return state_->position; }
  void set_position(size_t position);

  // torch::data sampler interface. reset() restarts the current epoch (with a new data set
  // size if one is given); next() returns up to batch_size indices, nullopt at the end.
  void reset(torch::optional<size_t> new_size = torch::nullopt) override;
  torch::optional<std::vector<size_t>> next(size_t batch_size) override;
  // Stores and restores epoch and position (and checks that the data set size, world size
  // and seed still match).
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void build_indices();

  // Shared by every copy of the sampler: torch::data::make_data_loader keeps its own copy,
  // and set_epoch()/set_position() on the caller's object must reach it.
  struct State {
    size_t dataset_size = 0;
    uint64_t epoch = 0;
    size_t position = 0;
    // set_position()/load() happened: the DataLoader's reset() at begin() keeps the position
    // once instead of starting the epoch over.
    bool resume_pending = false;
    std::vector<size_t> indices;
  };
  int rank_;
  int world_size_;
  DistributedSamplerOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace cohort
