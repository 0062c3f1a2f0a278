// Failures of an MPI job seen from outside: this test starts mpirun itself.
#include <gtest/gtest.h>

#include <chrono>

#include "support/process.h"

namespace cohort {
namespace {

std::string mpirun(int ranks, const std::string& mode) {
  return std::string(COHORT_MPIEXEC) + " " + COHORT_MPIEXEC_FLAGS + " -np " +
         std::to_string(ranks) + " " + COHORT_MPI_FAILURE_RANK + " " + mode + " 2>&1";
}

TEST(MpiFailure, AKilledRankEndsTheJobWithAClearErrorNotAHang) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = testing::run_shell(mpirun(3, "kill"), {}, std::chrono::seconds(120));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_NE(result.exit_code, -1) << "mpirun still ran after 120 s:\n" << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  // mpirun names the rank and the signal.
  EXPECT_NE(result.output.find("rank 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("signal 9"), std::string::npos) << result.output;
  EXPECT_EQ(result.output.find("every allreduce passed"), std::string::npos) << result.output;
  EXPECT_LT(took, std::chrono::seconds(60)) << result.output;
}

TEST(MpiFailure, AThreadLevelBelowMultipleIsAConfigErrorSayingWhy) {
  const auto result = testing::run_shell(mpirun(1, "thread-level"), {}, std::chrono::seconds(60));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("MPI_THREAD_SERIALIZED"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("needs MPI_THREAD_MULTIPLE"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace cohort
