// chunk_range must cut [0, count) into `parts` contiguous chunks with no gap or overlap, sizes
// differing by at most one (larger ones first), identically on every rank.
#include "algorithms/chunking.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace cohort {
namespace {

void expect_exact_cover(size_t count, size_t parts) {
  const std::string where = "count=" + std::to_string(count) + " parts=" + std::to_string(parts);
  size_t next = 0;
  size_t smallest = count + 1;
  size_t largest = 0;
  for (size_t i = 0; i < parts; ++i) {
    const Range r = chunk_range(count, parts, i);
    ASSERT_EQ(r.begin, next) << where << " chunk " << i << ": gap or overlap";
    ASSERT_EQ(r.end(), r.begin + r.count);
    if (i > 0) {
      ASSERT_LE(r.count, chunk_range(count, parts, i - 1).count)
          << where << ": larger chunks first";
    }
    smallest = std::min(smallest, r.count);
    largest = std::max(largest, r.count);
    next = r.end();
  }
  EXPECT_EQ(next, count) << where << ": chunks do not end at count";
  EXPECT_LE(largest - smallest, 1u) << where;
  EXPECT_EQ(largest, (count + parts - 1) / parts) << where;
}

TEST(ChunkingTest, CoversExactlyForManyShapes) {
  for (size_t parts = 1; parts <= 17; ++parts) {
    for (size_t count = 0; count <= 200; ++count) expect_exact_cover(count, parts);
  }
  for (const size_t count : {size_t{1} << 20, (size_t{1} << 20) + 7, size_t{1000003}}) {
    for (const size_t parts : {size_t{3}, size_t{7}, size_t{64}, size_t{1000}}) {
      expect_exact_cover(count, parts);
    }
  }
}

TEST(ChunkingTest, KnownSplits) {
  // 10 over 4: 3, 3, 2, 2.
  EXPECT_EQ(chunk_range(10, 4, 0).begin, 0u);
  EXPECT_EQ(chunk_range(10, 4, 0).count, 3u);
  EXPECT_EQ(chunk_range(10, 4, 1).begin, 3u);
  EXPECT_EQ(chunk_range(10, 4, 2).begin, 6u);
  EXPECT_EQ(chunk_range(10, 4, 2).count, 2u);
  EXPECT_EQ(chunk_range(10, 4, 3).begin, 8u);
  EXPECT_EQ(chunk_range(10, 4, 3).end(), 10u);
  // Fewer elements than parts: the tail chunks are empty but placed at the end.
  EXPECT_EQ(chunk_range(2, 5, 1).count, 1u);
  EXPECT_EQ(chunk_range(2, 5, 4).count, 0u);
  EXPECT_EQ(chunk_range(2, 5, 4).begin, 2u);
}

TEST(ChunkingTest, SegmentCount) {
  EXPECT_EQ(segment_count(0, 8), 1u);  // one empty message keeps the ranks in step
  EXPECT_EQ(segment_count(1, 8), 1u);
  EXPECT_EQ(segment_count(8, 8), 1u);
  EXPECT_EQ(segment_count(9, 8), 2u);
  EXPECT_EQ(segment_count(16, 8), 2u);
  EXPECT_EQ(segment_count(17, 1), 17u);
  for (size_t count = 1; count < 300; ++count) {
    for (size_t segment = 1; segment < 40; ++segment) {
      const size_t n = segment_count(count, segment);
      EXPECT_GE(n * segment, count);
      EXPECT_LT((n - 1) * segment, count);
    }
  }
}

}  // namespace
}  // namespace cohort
