// DistributedSampler: the ranks' shards together cover the data set once per epoch (padding or
// truncating the tail so every rank gets as many samples), every rank agrees on the shuffle,
// the shuffle is pinned so that it never changes silently, and the sampler works with
// torch::data's DataLoader and checkpoints.
#include "cohort/torch/data/distributed_sampler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "support/test_support.h"

namespace cohort {
namespace distributed_sampler_test {

DistributedSamplerOptions make_options(bool shuffle, uint64_t seed = 0, bool drop_last = false) {
  DistributedSamplerOptions options;
  options.shuffle = shuffle;
  options.seed = seed;
  options.drop_last = drop_last;
  return options;
}

std::vector<std::vector<size_t>> all_shards(size_t n, int world, DistributedSamplerOptions options,
                                            uint64_t epoch = 0) {
  std::vector<std::vector<size_t>> shards;
  for (int r = 0; r < world; ++r) {
    DistributedSampler sampler(n, r, world, options);
    sampler.set_epoch(epoch);
    shards.push_back(sampler.indices());
  }
  return shards;
}

// The order the ranks share out, rebuilt from their shards: position p is rank p % W's
// (p / W)-th index.
std::vector<size_t> interleave(const std::vector<std::vector<size_t>>& shards) {
  std::vector<size_t> order;
  const size_t world = shards.size();
  for (size_t p = 0; p < world * shards[0].size(); ++p)
    order.push_back(shards[p % world][p / world]);
  return order;
}

bool is_permutation_of_range(std::vector<size_t> values, size_t n) {
  if (values.size() != n) return false;
  std::sort(values.begin(), values.end());
  for (size_t i = 0; i < n; ++i) {
    if (values[i] != i) return false;
  }
  return true;
}

std::vector<size_t> drain(DistributedSampler& sampler, size_t batch_size) {
  std::vector<size_t> out;
  while (auto batch = sampler.next(batch_size)) out.insert(out.end(), batch->begin(), batch->end());
  return out;
}

TEST(DistributedSamplerTest, ShardsPartitionTheDataSetWhenDivisible) {
  for (const bool shuffle : {false, true}) {
    for (int world = 1; world <= 9; ++world) {
      for (const size_t per_rank : {size_t{1}, size_t{2}, size_t{7}, size_t{100}}) {
        const size_t n = per_rank * static_cast<size_t>(world);
        const auto shards = all_shards(n, world, make_options(shuffle, 5), 3);
        std::vector<size_t> all;
        for (const auto& shard : shards) {
          ASSERT_EQ(shard.size(), per_rank) << "n=" << n << " world=" << world;
          all.insert(all.end(), shard.begin(), shard.end());
        }
        EXPECT_TRUE(is_permutation_of_range(all, n))
            << "n=" << n << " world=" << world << " shuffle=" << shuffle;
      }
    }
  }
}

TEST(DistributedSamplerTest, PadsByRepeatingTheFirstIndicesWhenNotDivisible) {
  for (const bool shuffle : {false, true}) {
    for (int world = 2; world <= 9; ++world) {
      const size_t w = static_cast<size_t>(world);
      for (const size_t n : {w + 1, 3 * w - 1, size_t{101}}) {
        if (n % static_cast<size_t>(world) == 0) continue;
        const std::string where = "n=" + std::to_string(n) + " world=" + std::to_string(world);
        const auto shards = all_shards(n, world, make_options(shuffle, 9), 1);
        const size_t per_rank = (n + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
        for (const auto& shard : shards) ASSERT_EQ(shard.size(), per_rank) << where;
        const std::vector<size_t> order = interleave(shards);
        EXPECT_TRUE(is_permutation_of_range({order.begin(), order.begin() + n}, n)) << where;
        // The padding is the start of the order again, so only the first indices repeat.
        for (size_t p = n; p < order.size(); ++p) EXPECT_EQ(order[p], order[p - n]) << where;
      }
    }
  }
}

TEST(DistributedSamplerTest, DropLastTruncatesToAMultipleOfTheWorldSize) {
  for (const bool shuffle : {false, true}) {
    for (int world = 1; world <= 9; ++world) {
      const size_t w = static_cast<size_t>(world);
      for (const size_t n : {w, w + 1, 5 * w - 1}) {
        const std::string where = "n=" + std::to_string(n) + " world=" + std::to_string(world);
        const auto shards = all_shards(n, world, make_options(shuffle, 2, /*drop_last=*/true));
        const size_t per_rank = n / static_cast<size_t>(world);
        for (const auto& shard : shards) ASSERT_EQ(shard.size(), per_rank) << where;
        // The ranks' indices are the head of the same order the padded sampler uses.
        const std::vector<size_t> kept = interleave(shards);
        const std::vector<size_t> padded =
            interleave(all_shards(n, world, make_options(shuffle, 2)));
        EXPECT_TRUE(std::equal(kept.begin(), kept.end(), padded.begin())) << where;
        std::vector<size_t> sorted = kept;
        std::sort(sorted.begin(), sorted.end());
        EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
            << where << ": drop_last must not repeat an index";
      }
    }
  }
}

TEST(DistributedSamplerTest, PadsByRepeatingTheWholeOrderWhenFewerSamplesThanRanks) {
  // 3 samples over 8 ranks: the order is repeated until every rank has one.
  const auto shards = all_shards(3, 8, make_options(true, 11));
  const std::vector<size_t> order = interleave(shards);
  ASSERT_EQ(order.size(), 8u);
  EXPECT_TRUE(is_permutation_of_range({order.begin(), order.begin() + 3}, 3));
  for (size_t p = 3; p < 8; ++p) EXPECT_EQ(order[p], order[p % 3]) << "position " << p;

  // Unshuffled, 1 sample over 4 ranks: every rank gets index 0.
  for (const auto& shard : all_shards(1, 4, make_options(false))) {
    EXPECT_EQ(shard, std::vector<size_t>{0});
  }
}

TEST(DistributedSamplerTest, EmptyDataSetGivesEveryRankNothing) {
  DistributedSampler sampler(0, 1, 3);
  EXPECT_EQ(sampler.num_samples(), 0u);
  EXPECT_FALSE(sampler.next(4).has_value());
}

TEST(DistributedSamplerTest, EveryRankSeesTheSamePermutation) {
  // Two independent sets of samplers (as two processes would build them) agree.
  const auto first = all_shards(97, 4, make_options(true, 123), 6);
  const auto second = all_shards(97, 4, make_options(true, 123), 6);
  EXPECT_EQ(first, second);
}

TEST(DistributedSamplerTest, EpochAndSeedChangeThePermutation) {
  const auto base = interleave(all_shards(100, 4, make_options(true, 7), 0));
  const auto next_epoch = interleave(all_shards(100, 4, make_options(true, 7), 1));
  const auto other_seed = interleave(all_shards(100, 4, make_options(true, 8), 0));
  std::vector<size_t> identity(100);
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  EXPECT_NE(base, identity);
  EXPECT_NE(base, next_epoch);
  EXPECT_NE(base, other_seed);
  EXPECT_TRUE(is_permutation_of_range(next_epoch, 100));
  EXPECT_TRUE(is_permutation_of_range(other_seed, 100));
}

TEST(DistributedSamplerTest, ShufflePinnedForSeedZeroEpochZero) {
  // Note [Portable shuffle] in distributed_sampler.cc: these values must never change, or a
  // checkpointed run would resume on a different order. Computed once from the implementation
  // and checked against an independent Python re-implementation of mt19937_64 + the same
  // Fisher-Yates, so they hold for every standard library.
  DistributedSampler sampler(10, 0, 1, make_options(true, 0));
  EXPECT_EQ(sampler.indices(), (std::vector<size_t>{6, 1, 2, 4, 7, 5, 3, 0, 9, 8}));
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.indices(), (std::vector<size_t>{5, 0, 8, 7, 3, 1, 9, 6, 4, 2}));
  DistributedSampler seeded(10, 0, 1, make_options(true, 42));
  seeded.set_epoch(3);
  EXPECT_EQ(seeded.indices(), (std::vector<size_t>{6, 5, 7, 9, 4, 2, 0, 8, 3, 1}));
  // Rank 1 of 3 takes positions 1, 4, 7, 10 of seed 0 epoch 0's order (10 wraps to 0).
  DistributedSampler shard(10, 1, 3, make_options(true, 0));
  EXPECT_EQ(shard.indices(), (std::vector<size_t>{1, 7, 0, 6}));
}

TEST(DistributedSamplerTest, UnshuffledRankTakesEveryWorldSizethIndex) {
  for (int world = 1; world <= 5; ++world) {
    for (int rank = 0; rank < world; ++rank) {
      DistributedSampler sampler(20, rank, world, make_options(false));
      // When 20 is not a multiple of the world size the last positions wrap around to 0, 1, ...
      std::vector<size_t> expected;
      const size_t per_rank = (20 + static_cast<size_t>(world) - 1) / static_cast<size_t>(world);
      for (size_t k = 0; k < per_rank; ++k) {
        expected.push_back((static_cast<size_t>(rank) + k * static_cast<size_t>(world)) % 20);
      }
      EXPECT_EQ(sampler.indices(), expected) << "rank " << rank << " of " << world;
    }
  }
}

TEST(DistributedSamplerTest, NextSplitsTheShardIntoBatches) {
  DistributedSampler sampler(20, 1, 2, make_options(false));  // 1, 3, ..., 19
  auto batch = sampler.next(4);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(*batch, (std::vector<size_t>{1, 3, 5, 7}));
  EXPECT_EQ(sampler.position(), 4u);
  EXPECT_EQ(*sampler.next(4), (std::vector<size_t>{9, 11, 13, 15}));
  EXPECT_EQ(*sampler.next(4), (std::vector<size_t>{17, 19}));  // the last batch is short
  EXPECT_EQ(sampler.position(), 10u);
  EXPECT_FALSE(sampler.next(4).has_value());
  EXPECT_FALSE(sampler.next(4).has_value());

  sampler.reset();
  EXPECT_EQ(sampler.position(), 0u);
  EXPECT_EQ(drain(sampler, 3), sampler.indices());
}

TEST(DistributedSamplerTest, SetEpochRestartsTheEpoch) {
  DistributedSampler sampler(50, 0, 2, make_options(true, 1));
  sampler.next(5);
  sampler.set_epoch(4);
  EXPECT_EQ(sampler.epoch(), 4u);
  EXPECT_EQ(sampler.position(), 0u);
  EXPECT_EQ(sampler.indices(), all_shards(50, 2, make_options(true, 1), 4)[0]);
}

TEST(DistributedSamplerTest, ResetWithNewSizeRebuildsTheShard) {
  DistributedSampler sampler(10, 1, 3, make_options(true, 3));
  sampler.set_epoch(2);
  sampler.next(2);
  sampler.reset(31);
  EXPECT_EQ(sampler.position(), 0u);
  EXPECT_EQ(sampler.epoch(), 2u);
  EXPECT_EQ(sampler.num_samples(), 11u);
  EXPECT_EQ(sampler.indices(), all_shards(31, 3, make_options(true, 3), 2)[1]);
}

TEST(DistributedSamplerTest, SetPositionResumesMidEpoch) {
  DistributedSampler sampler(30, 2, 3, make_options(true, 4));
  const std::vector<size_t> all = sampler.indices();
  sampler.set_position(6);
  EXPECT_EQ(sampler.position(), 6u);
  EXPECT_EQ(drain(sampler, 4), std::vector<size_t>(all.begin() + 6, all.end()));
  sampler.set_position(sampler.num_samples());  // the end is a valid position
  EXPECT_FALSE(sampler.next(1).has_value());
  EXPECT_THROW(sampler.set_position(sampler.num_samples() + 1), InvalidArgument);
}

torch::serialize::InputArchive archive_of(const DistributedSampler& sampler) {
  std::stringstream stream;
  torch::serialize::OutputArchive out;
  sampler.save(out);
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  return in;
}

TEST(DistributedSamplerTest, SaveAndLoadRoundTrip) {
  DistributedSampler saved(45, 1, 4, make_options(true, 77));
  saved.set_epoch(9);
  saved.next(5);

  // A fresh sampler on another rank: epoch and position are the same on every rank, so one
  // rank's checkpoint resumes all of them. Rank 1 comes last: its check drains `saved`.
  for (const int rank : {3, 1}) {
    DistributedSampler loaded(45, rank, 4, make_options(true, 77));
    auto archive = archive_of(saved);
    loaded.load(archive);
    EXPECT_EQ(loaded.epoch(), 9u);
    EXPECT_EQ(loaded.position(), 5u);
    EXPECT_EQ(loaded.indices(), all_shards(45, 4, make_options(true, 77), 9)[rank]);
    if (rank == 1) {
      EXPECT_EQ(drain(loaded, 3), drain(saved, 3));
    }
  }
}

TEST(DistributedSamplerTest, SaveAndLoadKeepsALargeSeed) {
  // Seeds above INT64_MAX go through the int64 archive entries and come back unchanged.
  const uint64_t seed = 0xFEDCBA9876543210ull;
  DistributedSampler saved(12, 0, 2, make_options(true, seed));
  auto in = archive_of(saved);
  DistributedSampler loaded(12, 0, 2, make_options(true, seed));
  EXPECT_NO_THROW(loaded.load(in));
}

void expect_load_error(DistributedSampler& sampler, torch::serialize::InputArchive& archive,
                       const std::vector<std::string>& words) {
  const std::vector<size_t> before = sampler.indices();
  const size_t position = sampler.position();
  try {
    sampler.load(archive);
    ADD_FAILURE() << "load did not throw";
  } catch (const InvalidArgument& e) {
    for (const auto& word : words) {
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
          << "'" << word << "' missing from: " << e.what();
    }
  }
  // A failed load leaves the sampler as it was.
  EXPECT_EQ(sampler.indices(), before);
  EXPECT_EQ(sampler.position(), position);
}

TEST(DistributedSamplerTest, LoadRejectsAMismatchedRun) {
  DistributedSampler saved(40, 0, 4, make_options(true, 5));
  saved.set_epoch(2);
  saved.next(3);
  {
    DistributedSampler other_size(41, 0, 4, make_options(true, 5));
    auto archive = archive_of(saved);
    expect_load_error(other_size, archive, {"40", "41", "data set"});
  }
  {
    DistributedSampler other_world(40, 0, 5, make_options(true, 5));
    auto archive = archive_of(saved);
    expect_load_error(other_world, archive, {"4 ranks", "5", "world size"});
  }
  {
    DistributedSampler other_seed(40, 0, 4, make_options(true, 6));
    auto archive = archive_of(saved);
    expect_load_error(other_seed, archive, {"seed 5", "seed 6"});
  }
  {
    DistributedSampler other_shuffle(40, 0, 4, make_options(false, 5));
    auto archive = archive_of(saved);
    expect_load_error(other_shuffle, archive, {"shuffle = true", "shuffle = false"});
  }
}

TEST(DistributedSamplerTest, LoadRejectsAnArchiveWithoutSamplerState) {
  torch::serialize::OutputArchive out;
  out.write("something_else", c10::IValue(int64_t{1}));
  std::stringstream stream;
  out.save_to(stream);
  torch::serialize::InputArchive in;
  in.load_from(stream);
  DistributedSampler sampler(10, 0, 2);
  expect_load_error(sampler, in, {"distributed_sampler_epoch", "DistributedSampler::save"});
}

// A data set whose sample i holds i, to see which indices a DataLoader visits.
class IndexDataset : public torch::data::datasets::Dataset<IndexDataset> {
 public:
  explicit IndexDataset(size_t size) : size_(size) {}
  torch::data::Example<> get(size_t index) override {
    return {torch::tensor(static_cast<int64_t>(index)), torch::tensor(int64_t{0})};
  }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
};

TEST(DistributedSamplerTest, DrivesATorchDataLoader) {
  const IndexDataset dataset(23);
  for (const size_t workers : {size_t{0}, size_t{2}}) {
    for (int rank = 0; rank < 3; ++rank) {
      DistributedSampler sampler(*dataset.size(), rank, 3, make_options(true, 13));
      // One loader for all epochs: it holds a copy of the sampler that shares its epoch.
      auto loader = torch::data::make_data_loader(
          dataset, sampler, torch::data::DataLoaderOptions().batch_size(3).workers(workers));
      std::vector<size_t> previous;
      for (const uint64_t epoch : {uint64_t{0}, uint64_t{1}}) {
        sampler.set_epoch(epoch);
        std::vector<size_t> seen;
        size_t batches = 0;
        for (auto& batch : *loader) {
          EXPECT_LE(batch.size(), 3u);
          for (const auto& example : batch) seen.push_back(example.data.item<int64_t>());
          ++batches;
        }
        EXPECT_EQ(seen, sampler.indices()) << "rank " << rank << " epoch " << epoch;
        EXPECT_NE(seen, previous) << "epoch " << epoch << " did not reshuffle the loader";
        EXPECT_EQ(batches, 3u);  // 8 samples per rank in batches of 3
        previous = seen;
      }
    }
  }
}

TEST(DistributedSamplerTest, DataLoaderResumesFromARestoredPosition) {
  const IndexDataset dataset(20);
  DistributedSampler sampler(*dataset.size(), 1, 2, make_options(true, 5));
  auto loader = torch::data::make_data_loader(dataset, sampler,
                                              torch::data::DataLoaderOptions().batch_size(4));
  sampler.set_epoch(3);
  sampler.set_position(4);  // as after loading a checkpoint taken mid-epoch
  std::vector<size_t> seen;
  for (auto& batch : *loader) {
    for (const auto& example : batch) seen.push_back(example.data.item<int64_t>());
  }
  const auto& all = sampler.indices();
  EXPECT_EQ(seen, std::vector<size_t>(all.begin() + 4, all.end()));
  seen.clear();
  for (auto& batch : *loader) {  // the next pass over the loader starts the epoch over
    for (const auto& example : batch) seen.push_back(example.data.item<int64_t>());
  }
  EXPECT_EQ(seen, all);
}

TEST(DistributedSamplerTest, TakesRankAndSizeFromAGroup) {
  const auto groups = testing::make_inproc_groups(3);
  for (const auto& group : groups) {
    DistributedSampler from_group(17, *group, make_options(true, 21));
    DistributedSampler explicit_rank(17, group->rank(), 3, make_options(true, 21));
    EXPECT_EQ(from_group.indices(), explicit_rank.indices());
  }
}

TEST(DistributedSamplerTest, InvalidArgumentsThrow) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 0, -2), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, -1, 4), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 4, 4), InvalidArgument);
  EXPECT_THROW(DistributedSampler(3, 0, 4, make_options(true, 0, /*drop_last=*/true)),
               InvalidArgument);
  EXPECT_NO_THROW(DistributedSampler(4, 0, 4, make_options(true, 0, /*drop_last=*/true)));

  try {
    DistributedSampler(10, 5, 4);
    ADD_FAILURE() << "rank 5 of 4 did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
  }

  DistributedSampler sampler(10, 0, 4, make_options(true, 0, /*drop_last=*/true));
  EXPECT_THROW(sampler.reset(3), InvalidArgument);
  EXPECT_EQ(sampler.num_samples(), 2u);  // the failed reset changed nothing
  EXPECT_THROW(sampler.next(0), InvalidArgument);
}

}  // namespace distributed_sampler_test
}  // namespace cohort
