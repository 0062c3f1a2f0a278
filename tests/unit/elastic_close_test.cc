// The decision that closes a generation of an elastic job (Note [Elastic rendezvous]), on
// hand-made arrivals.
#include <gtest/gtest.h>

#include "elastic/generation_close.h"

namespace cohort::elastic {
namespace {

using Kind = CloseDecision::Kind;

ElasticOptions options(int min_size, int max_size = 0, int initial_size = 0) {
  ElasticOptions o;
  o.min_size = min_size;
  o.max_size = max_size;
  o.initial_size = initial_size > 0 ? initial_size : min_size;
  return o;
}

Arrival survivor(int previous_rank, int64_t committed, int failed_rank = -1) {
  Arrival a;
  a.id = "m" + std::to_string(previous_rank);
  a.previous_generation = 4;
  a.previous_rank = previous_rank;
  a.committed_step = committed;
  a.failed_rank = failed_rank;
  a.fingerprint = "model";
  return a;
}

Arrival newcomer(const std::string& id, const std::string& fingerprint = "model") {
  Arrival a;
  a.id = id;
  a.fingerprint = fingerprint;
  return a;
}

CloseInput fifth_generation(int previous_size) {
  CloseInput in;
  in.generation = 5;
  in.previous = PreviousGeneration{previous_size, "model"};
  return in;
}

TEST(ElasticClose, WaitsForSurvivorsNoErrorNamedDead) {
  CloseInput in = fifth_generation(3);
  in.arrivals = {survivor(0, 10)};
  EXPECT_EQ(decide_close(in, options(1)).kind, Kind::kWait);
  in.arrivals.push_back(survivor(2, 10, /*failed_rank=*/1));  // rank 1 named dead
  const auto d = decide_close(in, options(1));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(d.left, (std::vector<int>{1}));
}

TEST(ElasticClose, AfterTheSettleTimeAMissingMemberIsTakenForDead) {
  CloseInput in = fifth_generation(3);
  in.arrivals = {survivor(2, 10), survivor(0, 10)};
  EXPECT_EQ(decide_close(in, options(1)).kind, Kind::kWait);
  in.settled = true;
  const auto d = decide_close(in, options(1));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{1, 0}));  // survivors keep their order
  EXPECT_EQ(d.left, (std::vector<int>{1}));
}

TEST(ElasticClose, TheFreshestSurvivorBecomesRankZeroAndNewcomersComeLast) {
  CloseInput in = fifth_generation(2);
  in.arrivals = {newcomer("j"), survivor(0, 9), survivor(1, 10)};
  const auto d = decide_close(in, options(1));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{2, 1, 0}));
}

// Rank 0 of generation 4 died while healing ranks 1 and 2 (ElasticTrainer's receivers arrive
// with -1 until the whole state is in): nobody may be the next source.
TEST(ElasticClose, WhenNoArrivalHoldsTheJobsStateItFails) {
  CloseInput in = fifth_generation(3);
  in.previous->committed_step = 10;
  in.arrivals = {survivor(1, -1, /*failed_rank=*/0), survivor(2, -1, /*failed_rank=*/0)};
  const auto d = decide_close(in, options(1));
  ASSERT_EQ(d.kind, Kind::kFail);
  EXPECT_NE(d.error.find("no member that arrived holds the job's state (of step 11)"),
            std::string::npos)
      << d.error;
  ElasticOptions resumable = options(1);  // ElasticTrainer with a checkpoint_dir
  resumable.resume_lost_state = true;
  const auto lost = decide_close(in, resumable);
  ASSERT_EQ(lost.kind, Kind::kClose);
  EXPECT_EQ(lost.lost_step, 10);
  EXPECT_EQ(lost.admitted.size(), 2u);
  in.arrivals[1] = survivor(2, 10, /*failed_rank=*/0);  // one holds it: it becomes rank 0
  const auto kept = decide_close(in, options(1));
  ASSERT_EQ(kept.kind, Kind::kClose);
  EXPECT_EQ(kept.admitted, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(kept.lost_step, -1);
}

TEST(ElasticClose, ANewcomerAloneWaitsForTheRunningMembers) {
  CloseInput in = fifth_generation(2);
  in.arrivals = {newcomer("j")};
  EXPECT_EQ(decide_close(in, options(1)).kind, Kind::kWait);
  in.out_of_time = true;
  const auto d = decide_close(in, options(1));
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_NE(d.error.find("no member of generation 4 arrived"), std::string::npos) << d.error;
}

TEST(ElasticClose, ANewcomerAloneAfterTheJobFinishedFailsAtOnce) {
  CloseInput in = fifth_generation(2);
  in.arrivals = {newcomer("j")};
  in.finished = true;
  const auto d = decide_close(in, options(1));
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_NE(d.error.find("the job has finished"), std::string::npos) << d.error;
}

TEST(ElasticClose, AnotherModelAndAStaleMemberAreRefused) {
  CloseInput in = fifth_generation(1);
  Arrival stale = survivor(0, 3);
  stale.previous_generation = 2;
  in.arrivals = {survivor(0, 10), newcomer("other", "another model"), stale};
  const auto d = decide_close(in, options(1));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{0}));
  ASSERT_EQ(d.refused.size(), 2u);
  EXPECT_NE(d.refused.at(1).find("another model"), std::string::npos);
  EXPECT_NE(d.refused.at(2).find("declared dead"), std::string::npos);
}

TEST(ElasticClose, BelowTheMinimumItWaitsThenFails) {
  CloseInput in = fifth_generation(3);
  in.arrivals = {survivor(0, 10, 1), survivor(2, 10, 1)};
  EXPECT_EQ(decide_close(in, options(3)).kind, Kind::kWait);
  in.out_of_time = true;
  const auto d = decide_close(in, options(3));
  EXPECT_EQ(d.kind, Kind::kFail);
  EXPECT_NE(d.error.find("at least 3"), std::string::npos) << d.error;
}

TEST(ElasticClose, MaxSizeLeavesLateNewcomersForTheNextGeneration) {
  CloseInput in = fifth_generation(2);
  in.arrivals = {survivor(0, 10), survivor(1, 10), newcomer("a"), newcomer("b")};
  const auto d = decide_close(in, options(1, 3));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(d.refused.empty());
}

TEST(ElasticClose, TheFirstGenerationWaitsForTheLaunchedSizeOrdersByLaunchRank) {
  CloseInput in;
  in.generation = 1;
  Arrival a = newcomer("a"), b = newcomer("b");
  a.launch_rank = 1;
  b.launch_rank = 0;
  in.arrivals = {a};
  EXPECT_EQ(decide_close(in, options(1, 0, 2)).kind, Kind::kWait);
  in.arrivals.push_back(b);
  const auto d = decide_close(in, options(1, 0, 2));
  ASSERT_EQ(d.kind, Kind::kClose);
  EXPECT_EQ(d.admitted, (std::vector<size_t>{1, 0}));
}

}  // namespace
}  // namespace cohort::elastic
