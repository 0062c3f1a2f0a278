// Restart from a checkpoint, end to end: a DDP run under cohortrun --max-restarts 1 whose rank
// is killed mid-epoch resumes from its last checkpoint and ends with exactly (byte for byte)
// the parameters of a run that was never interrupted.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>

#include "support/process.h"

namespace cohort {
namespace {

constexpr std::chrono::seconds kDeadline{240};

// cohortrun --nproc-per-node 2 [launcher_args] ddp_restart_rank ... [rank_args]
testing::ShellResult train(const std::string& dir, const std::string& launcher_args,
                           const std::string& rank_args) {
  return testing::run_shell(COHORTRUN " --nproc-per-node 2 " + launcher_args +
                                " " DDP_RESTART_RANK " --checkpoint " + dir + "/ck --out " + dir +
                                "/params.bin " + rank_args,
                            {"OMP_NUM_THREADS=1"}, kDeadline);
}

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(Restart, AKilledRankResumesFromTheCheckpointWithTheSameParameters) {
  const std::string plain = testing::fresh_temp_dir("restart_plain"),
                    killed = testing::fresh_temp_dir("restart_killed");
  const testing::ShellResult reference = train(plain, "", "");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const testing::ShellResult restarted =
      train(killed, "--max-restarts 1", "--kill-rank 1 --kill-step 13");
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("rank 1 was killed by signal 9"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("[0] resumed at step 10 epoch 0"), std::string::npos)
      << restarted.output;
  const std::string expected = contents(plain + "/params.bin");
  ASSERT_FALSE(expected.empty());
  EXPECT_TRUE(contents(killed + "/params.bin") == expected)
      << "the restarted run's parameters differ from the uninterrupted run's";
}

TEST(Restart, WithoutRestartsTheKilledRankFailsTheJob) {
  const std::string dir = testing::fresh_temp_dir("restart_no_restart");
  const testing::ShellResult run = train(dir, "", "--kill-rank 0 --kill-step 3");
  EXPECT_EQ(run.exit_code, 128 + SIGKILL) << run.output;
  EXPECT_NE(run.output.find("job failed: rank 0 was killed by signal 9"), std::string::npos)
      << run.output;
}

}  // namespace
}  // namespace cohort
