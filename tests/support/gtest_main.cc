// The main of every gtest binary of tests/ (in place of gtest_main). With
// COHORT_GTEST_ALL_SKIPPED_EXIT=N in the environment, a run whose every test skipped itself
// exits with N, so that CTest, running a whole suite in one process, reports it as skipped
// rather than passed (Note [One process per suite], cmake/cohort_gtest_suites.cmake).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace {

class AllSkippedExit : public ::testing::EmptyTestEventListener {
 public:
  explicit AllSkippedExit(int code) : code_(code) {}

  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    const bool all_skipped = unit.test_to_run_count() > 0 && unit.failed_test_count() == 0 &&
                             unit.skipped_test_count() == unit.test_to_run_count();
    if (!all_skipped) return;
    std::fflush(stdout);
    std::exit(code_);
  }

 private:
  int code_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (const char* code = std::getenv("COHORT_GTEST_ALL_SKIPPED_EXIT")) {
    // The listener list owns it.
    ::testing::UnitTest::GetInstance()->listeners().Append(new AllSkippedExit(std::atoi(code)));
  }
  return RUN_ALL_TESTS();
}
