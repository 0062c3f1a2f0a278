// cohort::calibrate's public face (include/cohort/comm/calibration.h): what it writes is the
// cost model file groups read, shared-memory numbers that were not measured are the defaults,
// the choice table follows the numbers, and misuse is a named error.
#include "cohort/comm/calibration.h"

#include <gtest/gtest.h>

#include <string>

#include "cohort/core/error.h"
#include "cohort/comm/cost_model.h"
#include "support/test_support.h"

namespace cohort {
namespace {

Calibration measured() {
  Calibration c;
  c.tcp_alpha_s = 12e-6;
  c.tcp_beta_s_per_byte = 1 / 2.5e9;
  c.shm_alpha_s = 0.7e-6;
  c.shm_beta_s_per_byte = 1 / 14e9;
  c.gamma_s_per_byte = 1 / 7e9;
  c.shm_measured = true;
  return c;
}

TEST(Calibration, WritesTheCostModelGroupsRead) {
  const Calibration c = measured();
  const CostModel model = CostModel::from_json(c.to_json(), "test");
  EXPECT_NEAR(model.tcp.alpha_s, c.tcp_alpha_s, 1e-12);
  EXPECT_NEAR(model.tcp.beta_s_per_byte * 1e12, c.tcp_beta_s_per_byte * 1e12, 1e-6);
  EXPECT_NEAR(model.shm.alpha_s, c.shm_alpha_s, 1e-12);
  EXPECT_NEAR(model.shm.beta_s_per_byte * 1e12, c.shm_beta_s_per_byte * 1e12, 1e-6);
  EXPECT_NEAR(model.gamma_s_per_byte * 1e12, c.gamma_s_per_byte * 1e12, 1e-6);
}

TEST(Calibration, UnmeasuredSharedMemoryKeepsTheDefaults) {
  Calibration c = measured();
  c.shm_measured = false;
  const CostModel model = CostModel::from_json(c.to_json(), "test");
  EXPECT_NEAR(model.shm.alpha_s, CostModel::defaults().shm.alpha_s, 1e-12);
  EXPECT_NEAR(model.shm.beta_s_per_byte * 1e12, CostModel::defaults().shm.beta_s_per_byte * 1e12,
              1e-6);
}

TEST(Calibration, ChoiceTableFollowsTheNumbers) {
  Calibration c = measured();
  const std::string fast_shm = c.choice_table();
  EXPECT_NE(fast_shm.find("# 4 ranks, one host        shm"), std::string::npos) << fast_shm;
  c.shm_alpha_s = 1.0;  // a second per round: never worth it
  const std::string slow_shm = c.choice_table();
  EXPECT_EQ(slow_shm.find(" shm"), std::string::npos) << slow_shm;
}

TEST(Calibration, NeedsTwoRanks) {
  auto groups = testing::make_inproc_groups(1, testing::quick_options());
  EXPECT_THROW(calibrate(*groups[0]), InvalidArgument);
}

TEST(Calibration, AnUnwritablePathIsAConfigErrorNamingIt) {
  try {
    write_calibration(measured(), "/proc/cohort_cannot_write/cost_model.json");
    FAIL() << "wrote into /proc";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/cohort_cannot_write"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort
