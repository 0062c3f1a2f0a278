// Group::abort: the reason reaches every rank, pending work fails with it, and the group stays
// broken (every later call rethrows the first error).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "support/test_support.h"

namespace cohort {
namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(GroupAbort, EveryRankSeesTheReasonAndTheGroupStaysBroken) {
  const int world = 3;
  auto groups = testing::make_inproc_groups(world, testing::quick_options());
  std::vector<std::string> first(world), second(world);
  std::atomic<int> finished_first{0};
  testing::run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    std::vector<float> data(1000, 1.0f);
    group.allreduce(make_buffer(data));  // the group works before the abort
    ++finished_first;
    if (rank == 1) {
      // An abort breaks collectives in flight too; wait until nobody is still in the first one.
      while (finished_first.load() < world) std::this_thread::yield();
      group.abort("operator stopped the job");
    }
    // Ranks 0 and 2 may already be waiting in this allreduce when the abort lands.
    first[rank] = error_of([&] { group.allreduce(make_buffer(data)); });
    second[rank] = error_of([&] { group.barrier(); });
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_NE(first[rank].find("operator stopped the job"), std::string::npos) << first[rank];
    EXPECT_EQ(second[rank], first[rank]) << "a broken group rethrows its first error";
  }
  EXPECT_NE(first[0].find("rank 1 aborted the group"), std::string::npos) << first[0];
}

// Group::error() is null while the group works and the first error after; an abort with an
// exception keeps its kind on every rank (what FSDP tells its subgroups: a PeerError naming the
// dead rank stays a PeerError, which the elastic trainer recovers from).
TEST(GroupAbort, AnAbortWithAnExceptionKeepsItsKindAndErrorReportsIt) {
  const int world = 2;
  auto groups = testing::make_inproc_groups(world, testing::quick_options());
  std::vector<int> failed_rank(world, -2);
  std::vector<char> healthy_before(world), error_after(world);  // not vector<bool>: one per rank
  testing::run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    std::vector<float> data(16, 1.0f);
    group.allreduce(make_buffer(data));
    healthy_before[rank] = group.error() == nullptr;
    group.barrier();  // both saw the group healthy before rank 0 breaks it
    if (rank == 0) group.abort(std::make_exception_ptr(PeerError(7, "rank 7 died elsewhere")));
    try {
      group.allreduce(make_buffer(data));
    } catch (const PeerError& e) {
      failed_rank[rank] = e.failed_rank();
    } catch (const Error&) {
      failed_rank[rank] = -1;
    }
    error_after[rank] = group.error() != nullptr;
  });
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_TRUE(healthy_before[rank]) << "rank " << rank;
    EXPECT_EQ(failed_rank[rank], 7) << "rank " << rank << " did not see a PeerError naming 7";
    EXPECT_TRUE(error_after[rank]) << "rank " << rank;
  }
}

}  // namespace
}  // namespace cohort
