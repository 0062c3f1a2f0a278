// Straggler reports and the test-only slow-down (cohort/comm/straggler.h).
#include "cohort/comm/straggler.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "cohort/core/error.h"

namespace cohort {
namespace {

TEST(StepTimes, NamesTheSlowestRankAgainstTheMedian) {
  const auto report = StepTimes::of({20.0, 19.0, 42.0, 21.0});
  EXPECT_EQ(report.slowest_rank, 2);
  EXPECT_DOUBLE_EQ(report.slowest_ratio, 2.0);  // median of four: the upper middle, 21
  EXPECT_EQ(report.describe(),
            "compute ms per step by rank: 20.0 19.0 42.0 21.0; slowest: rank 2, 2.00x the median");
}

TEST(StepTimes, NoStepsMeansNoRatio) {
  const auto report = StepTimes::of({0.0, 0.0});
  EXPECT_EQ(report.slowest_ratio, 0.0);
}

class SlowRanksVar : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("COHORT_SLOW_RANKS"); }
};

TEST_F(SlowRanksVar, GivesEachListedRankItsFactor) {
  setenv("COHORT_SLOW_RANKS", "2:2.5,0:4", 1);
  EXPECT_DOUBLE_EQ(SlowDown::from_env(2).factor(), 2.5);
  EXPECT_DOUBLE_EQ(SlowDown::from_env(0).factor(), 4.0);
  EXPECT_DOUBLE_EQ(SlowDown::from_env(1).factor(), 1.0);
}

TEST_F(SlowRanksVar, UnsetMeansNobodyIsSlow) {
  unsetenv("COHORT_SLOW_RANKS");
  EXPECT_DOUBLE_EQ(SlowDown::from_env(0).factor(), 1.0);
}

TEST_F(SlowRanksVar, MalformedValuesAreRefusedNamingTheVariable) {
  for (const char* bad : {"2", "2:0.5", "x:2", "2:2x", "-1:2"}) {
    setenv("COHORT_SLOW_RANKS", bad, 1);
    try {
      SlowDown::from_env(0);
      ADD_FAILURE() << bad << " was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("COHORT_SLOW_RANKS"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace cohort
