// The programs of examples/minimal/ (README's quick start) run as a user runs them, under
// cohortrun: they train (the loss falls), and the FSDP program's sharded checkpoint resumes
// under another strategy. What each strategy computes is checked in process
// (tests/torch/strategy_test.cc); here, that the programs a user copies work.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "run_cohortrun.h"
#include "support/process.h"

namespace cohort {
namespace {

constexpr std::chrono::seconds kMinimalDeadline{120};

// The "mean loss X" figures of the output, in order.
std::vector<double> losses(const std::string& output) {
  std::vector<double> out;
  const std::regex figure(R"(mean loss ([0-9.]+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), figure);
       it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

void expect_it_learned(const std::string& output) {
  const auto loss = losses(output);
  ASSERT_EQ(loss.size(), 3u) << output;
  EXPECT_LT(loss.back(), 0.5 * loss.front()) << output;
}

TEST(MinimalExamples, DdpLearnsAtTwoRanks) {
  auto job = cohortrun({"--nproc-per-node", "2", MINIMAL_DDP});
  ASSERT_EQ(job.wait(kMinimalDeadline), 0) << job.output();
  EXPECT_NE(job.output().find("epoch 3: 64 steps on each of 2 ranks"), std::string::npos)
      << job.output();
  expect_it_learned(job.output());
}

TEST(MinimalExamples, FsdpLearnsInBfloat16AndZero2ResumesItsCheckpointAtOneRank) {
  const std::string checkpoint = testing::fresh_temp_dir("minimal_fsdp") + "/ckpt";
  auto job = cohortrun({"--nproc-per-node", "2", MINIMAL_FSDP, "full_shard", "bf16", checkpoint});
  ASSERT_EQ(job.wait(kMinimalDeadline), 0) << job.output();
  expect_it_learned(job.output());
  auto resumed = cohortrun({"--nproc-per-node", "1", MINIMAL_FSDP, "zero2", "fp32", checkpoint});
  ASSERT_EQ(resumed.wait(kMinimalDeadline), 0) << resumed.output();
  EXPECT_NE(resumed.output().find("resumed from " + checkpoint + " at epoch 4"), std::string::npos)
      << resumed.output();
}

TEST(MinimalExamples, ElasticTrainsEveryEpoch) {
  auto job = cohortrun({"--nproc-per-node", "3", "--min-ranks", "2", MINIMAL_ELASTIC},
                       {"OMP_NUM_THREADS=1"});
  ASSERT_EQ(job.wait(kMinimalDeadline), 0) << job.output();
  EXPECT_NE(job.output().find("trained 192 steps"), std::string::npos) << job.output();
  expect_it_learned(job.output());
}

}  // namespace
}  // namespace cohort
