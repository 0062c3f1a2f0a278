// Barrier: no rank leaves round k before every rank has entered it, over world sizes and many
// rounds, blocking and async, with ranks arriving at different times.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

class BarrierTest : public ::testing::TestWithParam<int> {};

// Each rank counts itself in before the barrier of round k; after it, all `world` of round k
// must have been counted. Late arrivals (a rank sleeping before some rounds) must hold the
// others back.
void run_rounds(int world, bool async) {
  auto groups = make_inproc_groups(world, testing::quick_options());
  std::atomic<int> entered{0};
  constexpr int kRounds = 30;
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    for (int round = 0; round < kRounds; ++round) {
      if ((round + rank) % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      entered.fetch_add(1);
      if (async) {
        auto work = group.barrier_async();
        work->wait();
        EXPECT_TRUE(work->is_completed());
      } else {
        group.barrier();
      }
      const int seen = entered.load();
      const std::string error = seen < (round + 1) * world
                                    ? "left round " + std::to_string(round) + " having seen " +
                                          std::to_string(seen) + " arrivals, want at least " +
                                          std::to_string((round + 1) * world)
                                    : "";
      testing::fail_if(group, error, "barrier world ", world);
    }
  });
}

TEST_P(BarrierTest, NoRankLeavesEarly) {
  run_rounds(GetParam(), false);
}

TEST_P(BarrierTest, AsyncNoRankLeavesEarly) {
  run_rounds(GetParam(), true);
}

INSTANTIATE_TEST_SUITE_P(World, BarrierTest, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
