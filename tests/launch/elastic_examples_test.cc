// Both examples with --elastic under cohortrun --min-ranks: a rank killed mid-run makes the
// others redo one step at the smaller world size and go on, cohortrun restarts it, and the run
// still commits every step it was asked for. (The exactness of elastic training is checked in
// tests/elastic; here, that the examples are wired to it.)
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_cohortrun.h"

namespace cohort {
namespace {

constexpr std::chrono::seconds kExampleDeadline{240};

// The rank processes cohortrun started (its children).
std::vector<int> children_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<int> pids;
  for (int child = 0; in >> child;) pids.push_back(child);
  return pids;
}

// Runs `program args` at 3 ranks, kills one rank once rank 0 printed step 10, and checks that
// the job ends well with `steps` committed steps.
void expect_training_through_a_kill(const std::string& program, std::vector<std::string> args,
                                    int steps) {
  std::vector<std::string> all = {"--nproc-per-node",
                                  "3",
                                  "--min-ranks",
                                  "2",
                                  "--max-restarts",
                                  "1",
                                  program,
                                  "--elastic",
                                  "--max-steps",
                                  std::to_string(steps),
                                  "--log-every",
                                  "5"};
  all.insert(all.end(), args.begin(), args.end());
  auto job = cohortrun(all, {"OMP_NUM_THREADS=1", "COHORT_ELASTIC_SETTLE_MS=500"});
  ASSERT_NE(job.wait_for_line("[0] step 10 ", kExampleDeadline), "") << job.output();
  const auto ranks = children_of(job.pid());
  ASSERT_EQ(ranks.size(), 3u) << job.output();
  ASSERT_EQ(::kill(ranks[2], SIGKILL), 0);
  ASSERT_EQ(job.wait(kExampleDeadline), 0) << job.output();
  const std::string out = job.output();
  EXPECT_TRUE(contains(out, "left (killed by signal 9")) << out;
  EXPECT_TRUE(contains(out, "[0] membership: generation 2:")) << out;
  EXPECT_TRUE(contains(out, "left; 2 ranks go on")) << out;
  EXPECT_TRUE(contains(out, ", " + std::to_string(steps) + " steps")) << out;
}

TEST(ElasticExamples, FashionMnistTrainsThroughAKill) {
  expect_training_through_a_kill(FASHION_MNIST,
                                 {"--model", "mlp", "--batch-size", "96", "--skip-eval"}, 150);
}

TEST(ElasticExamples, CharLmTrainsThroughAKill) {
  expect_training_through_a_kill(CHAR_LM,
                                 {"--layers", "1", "--width", "32", "--heads", "2", "--context",
                                  "32", "--batch-size", "24", "--skip-eval", "--sample", "0"},
                                 150);
}

}  // namespace
}  // namespace cohort
