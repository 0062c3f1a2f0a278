// cohort::DistributedSampler (include/cohort/torch/data/distributed_sampler.h).
//
// The shuffle is epoch_order.h's (Note [Portable shuffle]).
#include "cohort/torch/data/distributed_sampler.h"

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>

#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "epoch_order.h"

namespace cohort {
namespace {

// Keys of save()/load(). Prefixed so that a sampler can share an archive with other state.
constexpr const char* kEpochKey = "distributed_sampler_epoch";
constexpr const char* kPositionKey = "distributed_sampler_position";
constexpr const char* kDatasetSizeKey = "distributed_sampler_dataset_size";
constexpr const char* kWorldSizeKey = "distributed_sampler_world_size";
constexpr const char* kSeedKey = "distributed_sampler_seed";
constexpr const char* kShuffleKey = "distributed_sampler_shuffle";
constexpr const char* kDropLastKey = "distributed_sampler_drop_last";

// Positions the ranks share out: the whole order padded up to a multiple of the world size,
// or cut down to one with drop_last.
size_t total_positions(size_t n, int world_size, bool drop_last) {
  const size_t w = static_cast<size_t>(world_size);
  return drop_last ? n / w * w : (n + w - 1) / w * w;
}

// This rank's indices: positions rank, rank + W, ... of the order. A position past the end
// wraps around to the start (the padding repeats the first indices, the whole order as many
// times as needed when n < W), as PyTorch's DistributedSampler pads.
std::vector<size_t> shard_indices(size_t n, int rank, int world_size,
                                  const DistributedSamplerOptions& options, uint64_t epoch) {
  const std::vector<size_t> order = detail::epoch_order(n, options.shuffle, options.seed, epoch);
  const size_t total = total_positions(n, world_size, options.drop_last);
  std::vector<size_t> indices;
  indices.reserve(total / static_cast<size_t>(world_size));
  for (size_t p = static_cast<size_t>(rank); p < total; p += static_cast<size_t>(world_size)) {
    indices.push_back(order[p % n]);
  }
  return indices;
}

void check_world(int rank, int world_size) {
  COHORT_CHECK(world_size >= 1, "DistributedSampler: world_size must be at least 1, got ",
               world_size, "; pass the number of ranks (group.size())");
  COHORT_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank,
               " is outside [0, ", world_size, "); pass this process's rank (group.rank())");
}

void check_dataset_size(size_t dataset_size, int world_size, bool drop_last) {
  COHORT_CHECK(!drop_last || dataset_size >= static_cast<size_t>(world_size),
               "DistributedSampler: drop_last with ", dataset_size, " samples and ", world_size,
               " ranks leaves every rank with no samples; use a data set with at least as many "
               "samples as ranks, or drop_last = false (which pads)");
}

int64_t read_int(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue value;
  COHORT_CHECK(archive.try_read(key, value), "DistributedSampler::load: the archive has no '", key,
               "' entry; load the sampler from an archive written by DistributedSampler::save");
  COHORT_CHECK(value.isInt(), "DistributedSampler::load: the archive's '", key, "' entry is a ",
               value.tagKind(), ", not an integer; was it written by ",
               "DistributedSampler::save?");
  return value.toInt();
}

const char* bool_name(bool value) {
  return value ? "true" : "false";
}

// Integers are stored as int64 IValues: a uint64 (the seed, the epoch) is cast, and cast back.
void write_int(torch::serialize::OutputArchive& archive, const char* key, int64_t value) {
  archive.write(key, c10::IValue(value));
}

}  // namespace

DistributedSampler::DistributedSampler(size_t dataset_size, int rank, int world_size,
                                       DistributedSamplerOptions options)
    : rank_(rank), world_size_(world_size), options_(options), state_(std::make_shared<State>()) {
  state_->dataset_size = dataset_size;
  check_world(rank, world_size);
  check_dataset_size(dataset_size, world_size, options.drop_last);
  build_indices();
}

DistributedSampler::DistributedSampler(size_t dataset_size, const Group& group,
                                       DistributedSamplerOptions options)
    : DistributedSampler(dataset_size, group.rank(), group.size(), options) {}

void DistributedSampler::set_epoch(uint64_t epoch) {
  state_->epoch = epoch;
  state_->position = 0;
  state_->resume_pending = false;
  build_indices();
}

void DistributedSampler::set_position(size_t position) {
  COHORT_CHECK(position <= state_->indices.size(), "DistributedSampler::set_position: position ",
               position, " is past the end of the epoch, which has ", state_->indices.size(),
               " samples on this rank; pass a value in [0, num_samples()]");
  state_->position = position;
  state_->resume_pending = true;
}

void DistributedSampler::reset(torch::optional<size_t> new_size) {
  if (new_size.has_value()) {
    check_dataset_size(*new_size, world_size_, options_.drop_last);
    state_->dataset_size = *new_size;
    build_indices();
  }
  // Without a new size the indices are already this epoch's: the DataLoader calls reset() at
  // every begin(), so rebuilding them here would cost O(N) per epoch for nothing.
  if (state_->resume_pending && !new_size.has_value()) {
    state_->resume_pending = false;  // the loader's first begin() after a resume continues
    return;
  }
  state_->resume_pending = false;
  state_->position = 0;
}

torch::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  COHORT_CHECK(batch_size > 0, "DistributedSampler::next: batch_size must be at least 1 (a ",
               "batch of 0 would never reach the end of the epoch)");
  if (state_->position >= state_->indices.size()) return torch::nullopt;
  const size_t count = std::min(batch_size, state_->indices.size() - state_->position);
  const auto first = state_->indices.begin() + static_cast<std::ptrdiff_t>(state_->position);
  std::vector<size_t> batch(first, first + static_cast<std::ptrdiff_t>(count));
  state_->position += count;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  write_int(archive, kEpochKey, static_cast<int64_t>(state_->epoch));
  write_int(archive, kPositionKey, static_cast<int64_t>(state_->position));
  // The rank is not stored: epoch and position are the same on every rank, so one rank's
  // archive resumes all of them. What is stored beyond those is what must not have changed.
  write_int(archive, kDatasetSizeKey, static_cast<int64_t>(state_->dataset_size));
  write_int(archive, kWorldSizeKey, world_size_);
  write_int(archive, kSeedKey, static_cast<int64_t>(options_.seed));
  write_int(archive, kShuffleKey, options_.shuffle ? 1 : 0);
  write_int(archive, kDropLastKey, options_.drop_last ? 1 : 0);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  // Everything is read and checked before anything is changed, so a failed load leaves the
  // sampler as it was.
  const uint64_t epoch = static_cast<uint64_t>(read_int(archive, kEpochKey));
  const int64_t position = read_int(archive, kPositionKey);
  const int64_t dataset_size = read_int(archive, kDatasetSizeKey);
  const int64_t world_size = read_int(archive, kWorldSizeKey);
  const uint64_t seed = static_cast<uint64_t>(read_int(archive, kSeedKey));
  const bool shuffle = read_int(archive, kShuffleKey) != 0;
  const bool drop_last = read_int(archive, kDropLastKey) != 0;

  COHORT_CHECK(dataset_size == static_cast<int64_t>(state_->dataset_size),
               "DistributedSampler::load: the archive was saved for a data set of ", dataset_size,
               " samples but this sampler has ", state_->dataset_size,
               "; resume with the same data set (or construct the sampler with its size)");
  COHORT_CHECK(world_size == world_size_, "DistributedSampler::load: the archive was saved with ",
               world_size, " ranks but this sampler has ", world_size_,
               "; a mid-epoch position only means the same thing with the same world size");
  COHORT_CHECK(seed == options_.seed, "DistributedSampler::load: the archive was saved with seed ",
               seed, " but this sampler has seed ", options_.seed,
               "; construct the sampler with the seed of the run being resumed");
  COHORT_CHECK(shuffle == options_.shuffle, "DistributedSampler::load: the archive was saved with ",
               "shuffle = ", bool_name(shuffle),
               " but this sampler has shuffle = ", bool_name(options_.shuffle),
               "; construct the sampler with the options of the run being resumed");
  COHORT_CHECK(
      drop_last == options_.drop_last,
      "DistributedSampler::load: the archive was saved with drop_last = ", bool_name(drop_last),
      " but this sampler has drop_last = ", bool_name(options_.drop_last),
      "; construct the sampler with the options of the run being resumed");

  std::vector<size_t> indices =
      shard_indices(state_->dataset_size, rank_, world_size_, options_, epoch);
  COHORT_CHECK(position >= 0 && static_cast<uint64_t>(position) <= indices.size(),
               "DistributedSampler::load: the archive's position ", position, " is outside [0, ",
               indices.size(), "], the samples of one epoch on this rank; ",
               "the archive is corrupt");
  state_->epoch = epoch;
  state_->position = static_cast<size_t>(position);
  state_->indices = std::move(indices);
  state_->resume_pending = true;
}

void DistributedSampler::build_indices() {
  state_->indices =
      shard_indices(state_->dataset_size, rank_, world_size_, options_, state_->epoch);
}

}  // namespace cohort
