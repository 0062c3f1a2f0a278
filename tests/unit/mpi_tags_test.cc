// Note [MPI tags] (src/comm/backends/mpi/mpi_tags.h): the steps one collective uses between two
// ranks must get distinct MPI tags, and a step the packing cannot hold must be refused, never
// folded onto another. Pure logic: no MPI needed.
#include "backends/mpi/mpi_tags.h"

#include <gtest/gtest.h>

#include <set>

#include "cohort/comm/init.h"
#include "cohort/comm/mpi.h"

namespace cohort {
namespace {

constexpr int64_t kOpenMpiTagUb = (int64_t{1} << 31) - 1;

uint64_t ring_step(uint64_t phase, uint64_t ring_step, uint64_t segment) {
  return (phase << 56) | (ring_step << 28) | segment;  // allreduce_ring.cc
}
uint64_t round_step(uint64_t round, uint64_t segment) {
  return (round << 32) | segment;
}

TEST(MpiTags, StepsOfTheAlgorithmsGetDistinctTags) {
  const mpi::TagPacker tags(kOpenMpiTagUb);
  std::set<int> seen;
  size_t steps = 0;
  for (uint64_t phase = 0; phase < 2; ++phase) {
    for (uint64_t s = 0; s < 64; ++s) {
      for (uint64_t k = 0; k < 300; k += 7) {
        seen.insert(tags.collective_tag(ring_step(phase, s, k)));
        ++steps;
      }
    }
  }
  for (uint64_t round : {0, 1, 2, 63, 64, 128, 140, 255}) {
    for (uint64_t k = 0; k < 300; k += 7) {
      const int tag = tags.collective_tag(round_step(round, k));
      EXPECT_GE(tag, 0);
      EXPECT_LE(tag, kOpenMpiTagUb);
      seen.insert(tag);
      ++steps;
    }
  }
  // Ring steps (phase 0) and round steps share tags only where they are the same step value.
  std::set<uint64_t> values;
  for (uint64_t phase = 0; phase < 2; ++phase)
    for (uint64_t s = 0; s < 64; ++s)
      for (uint64_t k = 0; k < 300; k += 7) values.insert(ring_step(phase, s, k));
  for (uint64_t round : {0, 1, 2, 63, 64, 128, 140, 255})
    for (uint64_t k = 0; k < 300; k += 7) values.insert(round_step(round, k));
  EXPECT_EQ(seen.size(), values.size()) << steps << " steps";
}

TEST(MpiTags, AStepThatDoesNotFitIsRefusedNotFolded) {
  const mpi::TagPacker tags(kOpenMpiTagUb);
  EXPECT_THROW(tags.collective_tag(ring_step(0, 5000, 0)), ProtocolError);  // 5000 ranks
  EXPECT_THROW(tags.collective_tag(ring_step(0, 0, 1u << 20)), ProtocolError);
  EXPECT_THROW(tags.collective_tag(round_step(300, 0)), ProtocolError);
}

TEST(MpiTags, ATagSpaceTooSmallFailsOnlyWhenTagsAreNeeded) {
  const mpi::TagPacker tags(32767);  // the least the MPI standard allows
  try {
    tags.collective_tag(0);
    ADD_FAILURE() << "15 tag bits cannot hold cohort's steps";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("COHORT_MPI_COLLECTIVES=mpi"), std::string::npos);
  }
}

TEST(MpiOptions, ParsesTheModesAndBackends) {
  EXPECT_EQ(parse_mpi_collectives("mpi"), MpiCollectives::kMpi);
  EXPECT_EQ(parse_mpi_collectives("cohort"), MpiCollectives::kCohort);
  EXPECT_THROW(parse_mpi_collectives("nccl"), ConfigError);
  EXPECT_EQ(parse_backend("auto"), Backend::kAuto);
  EXPECT_EQ(parse_backend("native"), Backend::kNative);
  EXPECT_EQ(parse_backend("mpi"), Backend::kMpi);
  EXPECT_THROW(parse_backend("gloo"), ConfigError);
}

}  // namespace
}  // namespace cohort
