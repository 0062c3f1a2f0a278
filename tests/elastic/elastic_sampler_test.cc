// ElasticSampler: an epoch shared out among a world size that changes between steps.
#include "cohort/torch/data/elastic_sampler.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "cohort/core/error.h"

namespace cohort {
namespace {

// Takes one committed step at `world`: every rank's indices, which must not be empty.
std::vector<size_t> take_step(ElasticSampler& sampler, int world) {
  sampler.skip_small_tail(world);
  std::vector<size_t> all;
  for (int r = 0; r < world; ++r) {
    const auto mine = sampler.step_indices(r, world);
    EXPECT_FALSE(mine.empty());
    all.insert(all.end(), mine.begin(), mine.end());
  }
  sampler.advance(world);
  return all;
}

TEST(ElasticSampler, EverySampleOnceAcrossChangingWorldSizes) {
  ElasticSamplerOptions options;
  options.batch_per_rank = 3;
  options.seed = 5;
  ElasticSampler sampler(100, options);
  std::map<size_t, int> seen;
  const int worlds[] = {4, 4, 2, 3, 1, 4, 4, 3, 3, 2, 2, 4, 4, 4, 4, 4};
  size_t steps = 0;
  while (sampler.epoch() == 0) {
    for (size_t index : take_step(sampler, worlds[steps % 16])) ++seen[index];
    ++steps;
  }
  EXPECT_EQ(seen.size() + sampler.skipped(), 100u);
  for (const auto& [index, count] : seen) EXPECT_EQ(count, 1) << "index " << index;
  EXPECT_LT(sampler.skipped(), 4u);
}

TEST(ElasticSampler, AtAFixedWorldRankRTakesEveryWthPositionLikeDistributedSampler) {
  ElasticSamplerOptions options;
  options.batch_per_rank = 2;
  options.shuffle = false;
  ElasticSampler sampler(10, options);
  EXPECT_EQ(sampler.step_indices(1, 3), (std::vector<size_t>{1, 4}));
  sampler.advance(3);
  EXPECT_EQ(sampler.step_indices(0, 3), (std::vector<size_t>{6, 9}));
}

TEST(ElasticSampler, GlobalBatchStaysAndSharesDifferByAtMostOne) {
  ElasticSamplerOptions options;
  options.global_batch = 10;
  ElasticSampler sampler(100, options);
  EXPECT_EQ(sampler.step_samples(3), 10u);
  EXPECT_EQ(sampler.step_indices(0, 3).size(), 4u);
  EXPECT_EQ(sampler.step_indices(2, 3).size(), 3u);
  EXPECT_EQ(sampler.step_indices(1, 2).size(), 5u);
}

TEST(ElasticSampler, ATailSmallerThanTheWorldIsSkippedAndCounted) {
  ElasticSamplerOptions options;
  options.batch_per_rank = 4;
  ElasticSampler sampler(10, options);
  sampler.advance(2);  // 8 of 10 taken
  EXPECT_TRUE(sampler.skip_small_tail(3));
  EXPECT_EQ(sampler.epoch(), 1u);
  EXPECT_EQ(sampler.skipped(), 2u);
  EXPECT_EQ(sampler.position(), 0u);
}

TEST(ElasticSampler, RestoreMovesToAnotherEpochAndPosition) {
  ElasticSamplerOptions options;
  options.batch_per_rank = 2;
  options.seed = 3;
  ElasticSampler a(50, options), b(50, options);
  a.advance(2);
  a.advance(2);
  a.skip_small_tail(1);
  b.restore(a.epoch(), a.position(), a.skipped());
  EXPECT_EQ(b.step_indices(1, 2), a.step_indices(1, 2));
}

TEST(ElasticSampler, BadOptionsAreRefused) {
  EXPECT_THROW(ElasticSampler(10, ElasticSamplerOptions{}), InvalidArgument);
  ElasticSamplerOptions both;
  both.batch_per_rank = 1;
  both.global_batch = 2;
  EXPECT_THROW(ElasticSampler(10, both), InvalidArgument);
}

}  // namespace
}  // namespace cohort
