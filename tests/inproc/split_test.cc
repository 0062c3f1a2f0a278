// Group::split: ranks with the same color form a subgroup ordered by (key, rank); a negative
// color yields nullptr; collectives work on subgroups (also on sibling subgroups at the same
// time) and on the parent afterwards; subgroups split again.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

class SplitTest : public ::testing::TestWithParam<int> {};

TEST_P(SplitTest, ColorsKeysAndCollectivesOnSubgroups) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    // Three colors by rank mod 3, and rank 4 (if any) opts out. Keys reverse the order.
    auto color_of = [](int r) { return r == 4 ? -1 : r % 3; };
    auto sub = group.split(color_of(rank), -rank);
    if (color_of(rank) < 0) {
      testing::fail_if(group, sub == nullptr ? "" : "negative color gave a group", "split");
    } else {
      // Members: ranks with my color, largest rank first (keys are -rank).
      std::vector<int> members;
      for (int r = world - 1; r >= 0; --r) {
        if (color_of(r) == color_of(rank)) members.push_back(r);
      }
      std::string error;
      if (sub == nullptr)
        error = "got nullptr for color " + std::to_string(color_of(rank));
      else if (sub->size() != static_cast<int>(members.size()))
        error = "wrong size";
      else if (members[static_cast<size_t>(sub->rank())] != rank)
        error = "wrong rank order";
      testing::fail_if(group, error, "split world ", world, " rank ", rank);

      // Each member contributes its parent rank, at its subgroup rank's slot: allreduce over
      // the subgroup must give exactly the member list.
      for (Algorithm algorithm :
           {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling, Algorithm::kDirect}) {
        std::vector<int32_t> slots(members.size() + 1, 0);
        slots[static_cast<size_t>(sub->rank())] = rank + 1;
        slots.back() = 1;
        CollectiveOptions opts;
        opts.algorithm = algorithm;
        sub->allreduce(make_buffer(slots), opts);
        std::string wrong;
        for (size_t i = 0; i < members.size(); ++i) {
          if (slots[i] != members[i] + 1) wrong = "slot " + std::to_string(i) + " is wrong";
        }
        if (slots.back() != static_cast<int32_t>(members.size())) wrong = "wrong member count";
        testing::fail_if(*sub, wrong, "allreduce on subgroup ", algorithm_name(algorithm),
                         " world ", world);
      }
      std::vector<int32_t> from_first(3, rank);
      sub->broadcast(make_buffer(from_first));
      testing::fail_if(*sub, from_first[2] == members[0] ? "" : "broadcast on subgroup", "world ",
                       world);
    }
    // The parent still works, and its collectives line up after the split.
    std::vector<int64_t> ones(5, 1);
    group.allreduce(make_buffer(ones));
    testing::fail_if(group, ones[4] == world ? "" : "parent allreduce after split", "world ",
                     world);
  });
}

TEST_P(SplitTest, NestedSplitAndSingletons) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    // Halves, then each half into even and odd positions.
    auto half = group.split(rank < (world + 1) / 2 ? 0 : 1, rank);
    testing::fail_if(group, half ? "" : "no half", "world ", world);
    auto quarter = half->split(half->rank() % 2, half->rank());
    testing::fail_if(*half, quarter ? "" : "no quarter", "world ", world);
    std::vector<int32_t> ranks_sum(1, rank);
    quarter->allreduce(make_buffer(ranks_sum));
    // Recompute the quarter's members from the parent ranks.
    const int lo = rank < (world + 1) / 2 ? 0 : (world + 1) / 2;
    const int hi = rank < (world + 1) / 2 ? (world + 1) / 2 : world;
    int32_t want = 0;
    for (int r = lo; r < hi; ++r) {
      if ((r - lo) % 2 == (rank - lo) % 2) want += r;
    }
    testing::fail_if(*quarter, ranks_sum[0] == want ? "" : "nested split sum", "world ", world,
                     " rank ", rank);
    // A subgroup of one: collectives are no-ops that still work.
    auto alone = quarter->split(quarter->rank(), 0);
    std::vector<float> mine(3, 2.5f);
    alone->allreduce(make_buffer(mine));
    alone->barrier();
    testing::fail_if(*alone, alone->size() == 1 && mine[1] == 2.5f ? "" : "singleton group",
                     "world ", world);
    // Siblings run collectives at the same time without crosstalk, then the parent again.
    std::vector<int32_t> count(1, 1);
    half->allreduce(make_buffer(count));
    testing::fail_if(*half, count[0] == hi - lo ? "" : "sibling halves mixed up", "world ", world);
    group.barrier();
  });
}

INSTANTIATE_TEST_SUITE_P(World, SplitTest, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
