// The Group API over MPI beyond the collectives' results: async handles, point-to-point,
// subgroups (MPI_Comm_create_group), COHORT_DEBUG's mismatch check without a store, and failures
// that must reach every rank (a timeout on one rank, Group::abort) instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <vector>

#include "cohort/comm/mpi.h"
#include "cohort/core/error.h"
#include "mpi_world.h"

namespace cohort {
namespace {

using testing::mpi_world;

// A second group on MPI_COMM_WORLD, so a test may break it without breaking the world's.
std::shared_ptr<Group> spare_group(Milliseconds timeout, bool debug_checks = false) {
  GroupOptions options;
  options.timeout = timeout;
  options.debug_checks = debug_checks;
  return create_mpi_group(options);
}

TEST(MpiGroup, RanksMatchTheLauncher) {
  Group& group = mpi_world();
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  ASSERT_NE(size, nullptr) << "run under OpenMPI's mpirun";
  EXPECT_EQ(group.size(), std::atoi(size));
  EXPECT_EQ(group.rank(), std::atoi(rank));
  // Every rank of this test runs on one machine: one node, local ranks in rank order.
  EXPECT_EQ(group.num_nodes(), 1);
  EXPECT_EQ(group.local_size(), group.size());
  EXPECT_EQ(group.local_rank(), group.rank());
  EXPECT_EQ(group.backend(), Backend::kMpi);
}

TEST(MpiGroup, ManyAsyncAllreducesCompleteInOrder) {
  Group& group = mpi_world();
  std::vector<std::vector<float>> buffers(16, std::vector<float>(1000));
  std::vector<std::shared_ptr<Work>> works;
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::fill(buffers[i].begin(), buffers[i].end(), static_cast<float>(group.rank() + i));
    works.push_back(group.allreduce_async(make_buffer(buffers[i])));
  }
  const int n = group.size();
  for (size_t i = 0; i < buffers.size(); ++i) {
    works[i]->wait();
    const float want = static_cast<float>(n * (n - 1) / 2 + n * static_cast<int>(i));
    EXPECT_EQ(buffers[i].front(), want) << "buffer " << i;
    EXPECT_EQ(buffers[i].back(), want) << "buffer " << i;
  }
}

TEST(MpiGroup, SendRecvAroundTheRingWithTags) {
  Group& group = mpi_world();
  if (group.size() < 2) GTEST_SKIP() << "needs two ranks";
  const int next = (group.rank() + 1) % group.size();
  const int prev = (group.rank() + group.size() - 1) % group.size();
  for (uint32_t tag : {0u, 7u, 123456u}) {
    std::vector<int64_t> out(300, group.rank() * 1000 + tag), in(300, -1);
    CollectiveOptions opts;
    opts.tag = tag;
    auto send = group.send_async(make_buffer(out), next, opts);
    group.recv(make_buffer(in), prev, opts);
    send->wait();
    EXPECT_EQ(in.front(), prev * 1000 + tag);
    EXPECT_EQ(in.back(), prev * 1000 + tag);
  }
}

TEST(MpiGroup, SplitMakesSubgroupsOfTheirMembersWithMpisEngine) {
  Group& group = mpi_world();
  // Even ranks form one subgroup in reverse order, odd ranks another; the last rank of a
  // world of three or more sits out (color -1).
  const bool sits_out = group.size() >= 3 && group.rank() == group.size() - 1;
  const int color = sits_out ? -1 : group.rank() % 2;
  auto sub = group.split(color, -group.rank());
  if (sits_out) {
    EXPECT_EQ(sub, nullptr);
    return;
  }
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;
  for (int r = 0; r < group.size(); ++r) {
    const bool out = group.size() >= 3 && r == group.size() - 1;
    if (!out && r % 2 == color) members.push_back(r);
  }
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(sub->rank(),
            static_cast<int>(members.size()) - 1 -
                static_cast<int>(std::find(members.begin(), members.end(), group.rank()) -
                                 members.begin()));
  std::vector<int32_t> value{group.rank()};
  sub->allreduce(make_buffer(value));
  EXPECT_EQ(value[0], std::accumulate(members.begin(), members.end(), 0));
  // The subgroup has the parent's engine mode: MPI's own collectives where the parent ran them.
  EXPECT_EQ(sub->algorithm_for(CollectiveKind::kAllreduce, 1024),
            group.algorithm_for(CollectiveKind::kAllreduce, 1024));
}

TEST(MpiGroup, DebugChecksNameTheRanksThatDisagree) {
  Group& world = mpi_world();
  auto group = spare_group(std::chrono::seconds(20), /*debug_checks=*/true);
  std::vector<float> data(world.rank() == 0 ? 4 : 5, 1.0f);
  try {
    group->allreduce(make_buffer(data));
    ADD_FAILURE() << "ranks called allreduce with different counts and nothing was said";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 0 called allreduce(count=4"), std::string::npos)
        << e.what();
  }
  world.barrier();
}

// Collectives out of step without COHORT_DEBUG (Note [Call stamps]): rank 1 makes another call
// than the others; every rank throws MismatchError naming both calls, and nothing reaches MPI
// (no truncation, no abort on MPI_COMM_WORLD).
void expect_out_of_step(const std::function<void(Group&, bool odd)>& call,
                        const std::string& odd_call, const std::string& others_call) {
  Group& world = mpi_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  auto group = spare_group(std::chrono::seconds(20));
  group->barrier();
  try {
    call(*group, world.rank() == 1);
    ADD_FAILURE() << "ranks out of step and nothing was said";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 called " + odd_call), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 0 called " + others_call), std::string::npos)
        << e.what();
  }
  world.barrier();
}

TEST(MpiGroup, AllreduceWithAnotherCountIsAMismatchOnEveryRank) {
  expect_out_of_step(
      [](Group& group, bool odd) {
        std::vector<float> data(odd ? 8 : 4, 1.0f);
        group.allreduce(make_buffer(data));
      },
      "allreduce(count=8,", "allreduce(count=4,");
}

TEST(MpiGroup, AllgatherBesideAnAllreduceOfEqualBytesIsAMismatch) {
  expect_out_of_step(
      [](Group& group, bool odd) {
        std::vector<float> data(4 * static_cast<size_t>(group.size()), 1.0f);
        if (odd) {
          std::vector<float> mine(4, 1.0f);
          group.allgather(make_buffer(mine), make_buffer(data));
        } else {
          group.allreduce(make_buffer(data));
        }
      },
      "allgather(count=4,", "allreduce(count=");
}

TEST(MpiGroup, BroadcastFromAnotherRootIsAMismatch) {
  expect_out_of_step(
      [](Group& group, bool odd) {
        std::vector<float> data(16, 1.0f);
        CollectiveOptions options;
        options.root = odd ? 1 : 0;
        group.broadcast(make_buffer(data), options);
      },
      "broadcast(count=16, dtype=float32, root=1)", "broadcast(count=16, dtype=float32, root=0)");
}

TEST(MpiGroup, ATimeoutOnOneRankFailsTheOthersPromptly) {
  Group& world = mpi_world();
  // The others' own deadline (60 s) is far beyond the 20 s they are given below: an error in
  // time is rank 0's, told by its abort notice.
  auto group = spare_group(world.rank() == 0 ? Milliseconds(1500) : Milliseconds(60'000));
  std::vector<float> data(16, 1.0f);
  if (world.rank() == 0) {
    // Rank 0 alone calls the collective and times out...
    EXPECT_THROW(group->allreduce(make_buffer(data)), TimeoutError);
  }
  world.barrier();  // ...and only then do the others arrive.
  if (world.rank() != 0) {
    auto work = group->allreduce_async(make_buffer(data));
    try {
      // Ran out, wait says "did not finish within 20000 ms", which names no rank.
      work->wait(std::chrono::seconds(20));
      ADD_FAILURE() << "the allreduce passed on a group broken by rank 0";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    }
  }
  world.barrier();
}

// Rank 0 sends `sent` floats, rank 1 expects 5: the receive fails with a ProtocolError that
// says `expected`, and every rank's next call on the group fails too (rank 1's notice).
void expect_size_mismatch(size_t sent, const std::string& expected) {
  Group& world = mpi_world();
  auto group = spare_group(std::chrono::seconds(20));
  // Every rank has finished making the group (its constructor talks to the others) before
  // rank 1 breaks it; else a slow rank's constructor fails with rank 1's notice.
  group->barrier();
  if (world.rank() == 0) {
    std::vector<float> out(sent, 1.0f);
    try {
      group->send(make_buffer(out), 1);
    } catch (const Error&) {
      // Rank 1 may take the message, fail and send its notice before this send's wait has
      // seen the send complete; then the send reports rank 1's error. Either way is right.
    }
  } else if (world.rank() == 1) {
    std::vector<float> in(5);
    try {
      group->recv(make_buffer(in), 0);
      ADD_FAILURE() << "a message of " << sent << " floats was taken for 5";
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(group->barrier(), Error);
  world.barrier();
}

TEST(MpiGroup, AShortMessageIsAProtocolErrorSayingTheRanksDisagree) {
  expect_size_mismatch(4, "rank 0 sent 16 bytes where 20 were expected");
}

TEST(MpiGroup, ALongMessageIsAProtocolErrorNamingTheMpiCall) {
  expect_size_mismatch(6, "MPI_Irecv from rank 0 failed: MPI_ERR_TRUNCATE");
}

TEST(MpiGroup, AbortOnOneRankBreaksPendingCollectivesEverywhere) {
  Group& world = mpi_world();
  auto group = spare_group(std::chrono::seconds(20));
  std::vector<float> data(8, 1.0f);
  // The others post their allreduce before rank 0 aborts: it is pending when the abort comes.
  std::shared_ptr<Work> pending;
  if (world.rank() != 0) pending = group->allreduce_async(make_buffer(data));
  world.barrier();
  if (world.rank() == 0) {
    group->abort("stopping on purpose");
  } else {
    try {
      pending->wait();
      ADD_FAILURE() << "the allreduce completed although rank 0 never joined";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("stopping on purpose"), std::string::npos) << e.what();
    }
  }
  world.barrier();
}

}  // namespace
}  // namespace cohort
