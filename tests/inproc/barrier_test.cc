// Barrier: no rank leaves round k before every rank has entered it, over world sizes and many
// rounds, blocking and async, with a different rank arriving last in every round.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "support/sync.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

class BarrierTest : public ::testing::TestWithParam<int> {};

// Each rank counts itself in before the barrier of round k; after it, all `world` of round k
// must have been counted. In round k, rank k % world arrives last (once the others have counted
// themselves in, so they may be in the barrier already), and must hold them back.
void run_rounds(int world, bool async) {
  auto groups = make_inproc_groups(world, testing::quick_options());
  testing::EventCount entered;
  constexpr int kRounds = 30;
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    for (int round = 0; round < kRounds; ++round) {
      // Nobody reaches round k + 1 before the last of round k arrived: the count so far is
      // round k's and earlier rounds' only.
      if (rank == round % world &&
          !entered.wait_for((round + 1) * world - 1, std::chrono::seconds(60))) {
        throw std::runtime_error("the others never arrived in round " + std::to_string(round));
      }
      entered.add();
      if (async) {
        auto work = group.barrier_async();
        work->wait();
        EXPECT_TRUE(work->is_completed());
      } else {
        group.barrier();
      }
      const int seen = entered.value();
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
