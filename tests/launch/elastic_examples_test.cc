// Both examples with --elastic under cohortrun --min-ranks: a rank killed mid-run makes the
// others redo one step at the smaller world size and go on, cohortrun restarts it, and the run
// still commits every step it was asked for. (The exactness of elastic training is checked in
// tests/elastic; here, that the examples are wired to it.)
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "run_cohortrun.h"
#include "support/process.h"

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

// The --metrics file's records: each step once, from 1, with its world size and generation.
void expect_metrics_show_the_change(const std::string& path, int steps) {
  std::ifstream in(path);
  std::string line;
  int expected_step = 1;
  uint64_t last_generation = 0;
  std::set<int> worlds;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    EXPECT_EQ(record.at("step").get<int>(), expected_step++) << line;
    const auto generation = record.at("generation").get<uint64_t>();
    EXPECT_GE(generation, last_generation) << line;
    last_generation = generation;
    worlds.insert(record.at("world_size").get<int>());
  }
  EXPECT_EQ(expected_step, steps + 1) << "steps missing from " << path;
  EXPECT_TRUE(worlds.count(3) && worlds.count(2)) << "the file does not show the change";
  EXPECT_GE(last_generation, 2u);
}

// Runs `program args` at 3 ranks, kills one rank once rank 0 printed step 10, and checks that
// the job ends well with `steps` committed steps, that its metrics show the change, and that
// its checkpoints (every 50 steps and at the end) say which generation wrote them. Then a new
// job at 2 ranks resumes the last checkpoint and goes on to `steps` + 20.
void expect_training_through_a_kill(
    const std::string& program, std::vector<std::string> args, int steps,
    const std::string& dir = testing::fresh_temp_dir("elastic_example")) {
  const std::string metrics = dir + "/steps.jsonl", checkpoint = dir + "/ckpt";
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
                                  "5",
                                  "--metrics",
                                  metrics,
                                  "--checkpoint",
                                  checkpoint,
                                  "--checkpoint-every",
                                  "50"};
  all.insert(all.end(), args.begin(), args.end());
  auto job = cohortrun(all, {"OMP_NUM_THREADS=1", "COHORT_ELASTIC_SETTLE_MS=500"});
  ASSERT_NE(job.wait_for_line("[slot 0] step 10 ", kExampleDeadline), "") << job.output();
  const auto ranks = children_of(job.pid());
  ASSERT_EQ(ranks.size(), 3u) << job.output();
  ASSERT_EQ(::kill(ranks[2], SIGKILL), 0);
  ASSERT_EQ(job.wait(kExampleDeadline), 0) << job.output();
  const std::string out = job.output();
  EXPECT_TRUE(contains(out, "left (killed by signal 9")) << out;
  EXPECT_TRUE(contains(out, "[slot 0] membership: generation 2:")) << out;
  EXPECT_TRUE(contains(out, "left; 2 ranks go on")) << out;
  EXPECT_TRUE(contains(out, ", " + std::to_string(steps) + " steps")) << out;
  expect_metrics_show_the_change(metrics, steps);
  // Written by whichever member was rank 0 then; the kill at step 10 made generation 2.
  for (int step = 50; step <= steps; step += 50) {
    EXPECT_TRUE(contains(out, "[slot 0] checkpoint of step " + std::to_string(step) +
                                  " written to " + checkpoint + ".elastic (generation "))
        << out;
  }
  EXPECT_FALSE(contains(out, ".elastic (generation 1,")) << out;

  std::vector<std::string> resumed = {"--nproc-per-node",
                                      "2",
                                      "--min-ranks",
                                      "2",
                                      program,
                                      "--elastic",
                                      "--max-steps",
                                      std::to_string(steps + 20),
                                      "--checkpoint",
                                      checkpoint,
                                      "--resume"};
  resumed.insert(resumed.end(), args.begin(), args.end());
  auto next = cohortrun(resumed, {"OMP_NUM_THREADS=1"});
  ASSERT_EQ(next.wait(kExampleDeadline), 0) << next.output();
  EXPECT_TRUE(contains(next.output(), "[slot 0] resumed from " + checkpoint + ".elastic at step " +
                                          std::to_string(steps)))
      << next.output();
  EXPECT_TRUE(contains(next.output(), ", " + std::to_string(steps + 20) + " steps"))
      << next.output();
}

// The --metrics records' learning rates: the warm-up and decay act under --elastic as without
// it (ElasticTrainerOptions::lr_schedule), through the kill; --sync-bn's layers follow each
// generation's group (ElasticTrainerOptions::sync_batchnorm).
std::vector<double> learning_rates(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> lrs;
  for (std::string line; std::getline(in, line);) {
    lrs.push_back(nlohmann::json::parse(line).at("lr").get<double>());
  }
  return lrs;
}

TEST(ElasticExamples, FashionMnistTrainsThroughAKill) {
  const std::string dir = testing::fresh_temp_dir("elastic_example_lr");
  expect_training_through_a_kill(FASHION_MNIST,
                                 {"--model", "cnn_bn", "--sync-bn", "--batch-size", "96",
                                  "--skip-eval", "--warmup-steps", "20", "--lr-schedule", "cosine"},
                                 150, dir);
  // lr 0.01 scaled to the batch of 96: 0.015; step 1 of 20 warm-up steps at 1/20 of it, the
  // warm-up's last at all of it, then a cosine to 0 at step 150.
  const auto lrs = learning_rates(dir + "/steps.jsonl");
  ASSERT_EQ(lrs.size(), 150u);
  EXPECT_NEAR(lrs[0], 0.015 / 20, 1e-9);
  EXPECT_NEAR(lrs[19], 0.015, 1e-9);
  EXPECT_LT(lrs[149], 0.015 * 1e-3);
  for (size_t i = 20; i < lrs.size(); ++i) EXPECT_LE(lrs[i], lrs[i - 1]) << "step " << i + 1;
}

// Every option acts under --elastic as without it or is refused by name, before the rank
// joins anything (docs/elastic.md, "The examples' --elastic").
TEST(ElasticExamples, OptionsThatCannotActUnderElasticAreRefusedByName) {
  struct Refused {
    const char* program;
    std::string args, named;
  };
  const Refused cases[] = {
      {FASHION_MNIST, "--time-limit 5", "--elastic does not take --time-limit"},
      {FASHION_MNIST, "--comm-hook powersgd", "--elastic does not take --comm-hook powersgd"},
      {FASHION_MNIST, "--strategy auto", "--elastic does not take --strategy auto"},
      {FASHION_MNIST, "--strategy zero1 --precision bf16 --master-weights",
       "are not available under zero1 and zero2"},
      {CHAR_LM, "--local-sgd 4", "ElasticTrainer does not train with local SGD"},
      {CHAR_LM, "--comm-hook topk", "--elastic does not take --comm-hook topk"},
  };
  for (const Refused& c : cases) {
    testing::ChildProcess run(
        {"/bin/sh", "-c", std::string("exec ") + c.program + " --elastic " + c.args + " 2>&1"},
        {"OMP_NUM_THREADS=1"});
    EXPECT_EQ(run.wait(std::chrono::seconds(60)), 2) << c.args << "\n" << run.output();
    EXPECT_TRUE(contains(run.output(), c.named)) << c.args << "\n" << run.output();
  }
}

// A sharded strategy (--strategy, through cohort::train_elastic_as), with --clip over the
// shards and bfloat16 autocast: the killed member's shards come from the survivors' buddy
// copies.
TEST(ElasticExamples, CharLmUnderZero2TrainsThroughAKill) {
  expect_training_through_a_kill(
      CHAR_LM,
      {"--layers", "1", "--width", "32", "--heads", "2", "--context", "32", "--batch-size", "24",
       "--skip-eval", "--sample", "0", "--strategy", "zero2", "--clip", "1", "--precision", "bf16"},
      150);
}

// DiLoCo (ElasticTrainerOptions::diloco): the killed rank is noticed at the next synchronization,
// which the survivors redo without it.
TEST(ElasticExamples, CharLmWithDiLoCoTrainsThroughAKill) {
  expect_training_through_a_kill(
      CHAR_LM,
      {"--layers", "1", "--width", "32", "--heads", "2", "--context", "32", "--batch-size", "24",
       "--skip-eval", "--sample", "0", "--diloco", "10"},
      150);
}

}  // namespace
}  // namespace cohort
