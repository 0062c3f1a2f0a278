// cohortrun's reading of the ranks that a failed rank's error names (tools/cohortrun/blame.h),
// on the wording of cohort's own PeerError and TimeoutError messages.
#include "blame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort::run {
namespace {

using Ranks = std::vector<int>;

Ranks blamed(const std::string& line, int self = 3, int world = 8) {
  return ranks_blamed_by({"some output", line}, self, world);
}

TEST(Blame, RanksThatNeverJoinedACollective) {
  EXPECT_EQ(blamed("  what():  barrier #2 timed out after 2000 ms on rank 3 (deadline passed); "
                   "ranks that never joined it: 0 (stalled in #1), 5 (in no collective of this group)"),
            (Ranks{0, 5}));
}

TEST(Blame, TheRankAPeerErrorSaysFailed) {
  EXPECT_EQ(blamed("allreduce #4 failed on rank 3: waiting for a slot: rank 1 (pid 4242) died; "
                   "its shared memory peers cannot go on"),
            (Ranks{1}));
  EXPECT_EQ(blamed("allreduce #4 failed on rank 3: lost the connection to rank 6 (10.0.0.2:4711) "
                   "while sending: Broken pipe; its process probably died"),
            (Ranks{6}));
  EXPECT_EQ(blamed("connection to rank 2 failed: reset"), (Ranks{2}));
  EXPECT_EQ(blamed("rank 7 has closed its group"), (Ranks{7}));
  EXPECT_EQ(blamed("rank 4 (10.0.0.3:1234) broke the protocol: bad frame"), (Ranks{4}));
}

TEST(Blame, NotTheReportingRankNorARelay) {
  EXPECT_EQ(blamed("barrier #1 failed on rank 3: rank 3 (pid 1) died"), Ranks{});
  EXPECT_EQ(blamed("rank 5 aborted the group: cohort-bench rank 5 failed: oops"), Ranks{});
  EXPECT_EQ(blamed("step 12 rank 2 loss 0.3"), Ranks{});
}

TEST(Blame, EachRankOnceAndOnlyRanksOfTheJob) {
  EXPECT_EQ(ranks_blamed_by({"rank 1 (pid 9) died", "connection to rank 1 failed: x",
                             "connection to rank 12 failed: x"},
                            0, 4),
            (Ranks{1}));
}

}  // namespace
}  // namespace cohort::run
