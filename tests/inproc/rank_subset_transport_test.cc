// RankSubsetTransport: a view of some ranks of a transport, and the split of such a view,
// route messages to the right underlying ranks.
#include "transport/rank_subset_transport.h"

#include <gtest/gtest.h>

#include "cohort/comm/inproc_transport.h"
#include "support/test_support.h"

namespace cohort {
namespace {

TEST(RankSubsetTransport, ASplitOfAViewTalksToTheComposedRanks) {
  constexpr int kWorld = 4;
  auto fabric = std::make_shared<InprocFabric>(kWorld);
  const Tag tag{7, 1};
  testing::run_ranks(kWorld, [&](int rank) {
    if (rank == 1) return;  // outside the view {0, 2, 3}
    InprocTransport whole(fabric, rank);
    RankSubsetTransport view(whole, {0, 2, 3});
    // View ranks 1 and 2 (underlying 2 and 3) form the split.
    if (rank == 0) return;
    std::unique_ptr<Transport> pair =
        view.split(SplitSpec{{1, 2}, "pair", nullptr, Deadline::after(Milliseconds(10000))});
    EXPECT_EQ(pair->size(), 2);
    EXPECT_EQ(pair->rank(), rank == 2 ? 0 : 1);
    int32_t value = rank;
    if (pair->rank() == 0) {
      pair->isend(1, tag, &value, sizeof value, Deadline::after(Milliseconds(10000)))->wait();
    } else {
      pair->irecv(0, tag, &value, sizeof value, Deadline::after(Milliseconds(10000)))->wait();
      EXPECT_EQ(value, 2);
    }
  });
}

}  // namespace
}  // namespace cohort
