// Environment knobs: valid values parse, unset/empty mean "not given", malformed ones fail
// loudly naming the variable instead of being ignored.
#include "cohort/core/env.h"

#include <gtest/gtest.h>

#include "cohort/comm/group.h"

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>

#include "cohort/core/error.h"

namespace cohort {
namespace {

constexpr const char* kName = "COHORT_ENV_TEST_VALUE";

// Sets (or unsets, for nullptr) the variable for one test and restores "unset" afterwards.
class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv(kName); }
  void set(const char* value) {
    if (value == nullptr) {
      unsetenv(kName);
    } else {
      setenv(kName, value, 1);
    }
  }
};

TEST_F(EnvTest, UnsetAndEmptyAreNullopt) {
  set(nullptr);
  EXPECT_FALSE(env_string(kName).has_value());
  EXPECT_FALSE(env_int(kName).has_value());
  EXPECT_FALSE(env_double(kName).has_value());
  set("");
  EXPECT_FALSE(env_string(kName).has_value());
  EXPECT_FALSE(env_int(kName).has_value());
  EXPECT_FALSE(env_double(kName).has_value());
}

TEST_F(EnvTest, StringIsReturnedVerbatim) {
  set(" ring ");
  EXPECT_EQ(env_string(kName), std::optional<std::string>(" ring "));
}

TEST_F(EnvTest, IntegersParse) {
  set("42");
  EXPECT_EQ(env_int(kName), std::optional<int64_t>(42));
  set("-7");
  EXPECT_EQ(env_int(kName), std::optional<int64_t>(-7));
  set("9223372036854775807");
  EXPECT_EQ(env_int(kName), std::optional<int64_t>(INT64_MAX));
}

TEST_F(EnvTest, DoublesParse) {
  set("1.5");
  EXPECT_EQ(env_double(kName), std::optional<double>(1.5));
  set("-2e3");
  EXPECT_EQ(env_double(kName), std::optional<double>(-2000.0));
  set("7");
  EXPECT_EQ(env_double(kName), std::optional<double>(7.0));
}

void expect_config_error(const std::function<void()>& read, const std::string& value) {
  try {
    read();
    ADD_FAILURE() << "'" << value << "' was accepted";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(kName), std::string::npos) << what;
    EXPECT_NE(what.find("'" + value + "'"), std::string::npos) << what;
  }
}

TEST_F(EnvTest, MalformedIntegersThrowConfigErrorNamingTheVariable) {
  for (const char* bad : {"abc", "12abc", "1.5", "0x10", "42 ", "99999999999999999999", "-"}) {
    set(bad);
    expect_config_error([] { env_int(kName); }, bad);
  }
}

TEST_F(EnvTest, MalformedDoublesThrowConfigErrorNamingTheVariable) {
  for (const char* bad : {"fast", "1.5s", "1e999", "--1", ".", "nan", "inf", "-inf"}) {
    set(bad);
    expect_config_error([] { env_double(kName); }, bad);
  }
}

}  // namespace
}  // namespace cohort

namespace cohort {
namespace {

// COHORT_TIMEOUT_S must be a sane number of seconds: values that would overflow the
// millisecond conversion (or mean "never" by accident) are configuration errors.
TEST(GroupOptionsEnv, TimeoutOutOfRangeIsAConfigError) {
  for (const char* bad : {"0", "-5", "1e300", "nan"}) {
    setenv("COHORT_TIMEOUT_S", bad, 1);
    EXPECT_THROW(GroupOptions{}.resolved(), ConfigError) << bad;
  }
  setenv("COHORT_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(GroupOptions{}.resolved().timeout, Milliseconds(2500));
  unsetenv("COHORT_TIMEOUT_S");
  EXPECT_EQ(GroupOptions{}.resolved().timeout, Milliseconds(300'000));
}

TEST(GroupOptionsEnv, UnknownAlgorithmOrDebugModeIsAConfigError) {
  setenv("COHORT_ALGO", "fastest", 1);
  EXPECT_THROW(GroupOptions{}.resolved(), ConfigError);
  setenv("COHORT_ALGO", "hd", 1);
  EXPECT_EQ(GroupOptions{}.resolved().algorithm, Algorithm::kHalvingDoubling);
  unsetenv("COHORT_ALGO");
  setenv("COHORT_DEBUG", "verbose", 1);
  EXPECT_THROW(GroupOptions{}.resolved(), ConfigError);
  setenv("COHORT_DEBUG", "detail", 1);
  EXPECT_TRUE(GroupOptions{}.resolved().debug_checks);
  unsetenv("COHORT_DEBUG");
}

}  // namespace
}  // namespace cohort
