// Note [MPI tags] (src/comm/engines/mpi/mpi_tags.h): the steps one collective uses between two
// ranks must get distinct MPI tags, and a step the packing cannot hold must be refused, never
// folded onto another. Pure logic: no MPI needed.
#include "engines/mpi/mpi_tags.h"

#include <gtest/gtest.h>

#include <set>

#include "cohort/comm/init.h"
#include "cohort/comm/mpi.h"

namespace cohort {
namespace {

constexpr int64_t kOpenMpiTagUb = (int64_t{1} << 31) - 1;

uint64_t step(uint32_t round, uint32_t segment) {
  return algo::wire_step(algo::Step(round, segment));
}

// The ring allreduce at 64 ranks uses rounds 0..125; trees and halving use a few rounds of
// many segments.
TEST(MpiTags, StepsOfTheAlgorithmsGetDistinctTags) {
  const mpi::TagPacker tags(kOpenMpiTagUb);
  std::set<int> seen;
  size_t steps = 0;
  for (uint32_t round = 0; round < 2 * 63; ++round) {
    for (uint32_t k = 0; k < 3000; k += 7) {
      const int tag = tags.collective_tag(step(round, k));
      EXPECT_GE(tag, 0);
      EXPECT_LE(tag, kOpenMpiTagUb);
      seen.insert(tag);
      ++steps;
    }
  }
  EXPECT_EQ(seen.size(), steps);
}

TEST(MpiTags, AStepThatDoesNotFitIsRefusedNotFolded) {
  const mpi::TagPacker tags(kOpenMpiTagUb);
  EXPECT_NO_THROW(tags.collective_tag(step(2 * 8191 - 1, 0)));  // the ring at 8192 ranks
  EXPECT_THROW(tags.collective_tag(step(2 * 8192, 0)), ProtocolError);
  EXPECT_NO_THROW(tags.collective_tag(step(0, (1u << 17) - 1)));
  EXPECT_THROW(tags.collective_tag(step(0, 1u << 17)), ProtocolError);
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
  EXPECT_THROW(parse_backend("nccl"), ConfigError);  // made by create_nccl_group, not init()
  EXPECT_STREQ(backend_name(Backend::kNccl), "NCCL");
}

// init() makes host groups; an NCCL group is made over one, and the error says how.
TEST(MpiOptions, InitRefusesTheNcclBackendNamingTheWayToMakeOne) {
  InitOptions options;
  options.backend = Backend::kNccl;
  try {
    init(LaunchEnv{}, options);
    ADD_FAILURE() << "init() made a group for Backend::kNccl";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("create_nccl_group"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
