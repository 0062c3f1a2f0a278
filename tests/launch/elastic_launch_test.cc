// cohortrun --min-ranks (elastic mode) end to end, with ranks (elastic_test_rank) that train
// committed steps over cohort::ElasticGroup: a killed rank does not stop the others, its slot
// is restarted alone and the new process joins the running job at a step boundary; no
// committed step is lost or done twice; below --min-ranks the survivors end with an
// ElasticError. Each step's output line says the generation's size, so the tests read the
// job's membership from what the ranks printed.
#include <gtest/gtest.h>
#include <signal.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_cohortrun.h"

namespace cohort {
namespace {

// Small deadlines, so that a failure is found and a generation formed within seconds.
const std::vector<std::string> kFastEnv = {"COHORT_TIMEOUT_S=5", "COHORT_ELASTIC_SETTLE_MS=500",
                                           "COHORT_ELASTIC_TIMEOUT_S=3"};

struct Step {
  int step = 0;
  int size = 0;
};

// What one process of a slot printed: its committed steps, in order.
struct Lifetime {
  std::vector<Step> steps;
};

// Every process's committed steps, by slot, a new lifetime at each "pid" line (the relay keeps
// each rank's stdout in order).
std::map<int, std::vector<Lifetime>> lifetimes(const std::string& output) {
  std::map<int, std::vector<Lifetime>> slots;
  const std::regex pid(R"(^\[(\d+)\] pid \d+$)");
  const std::regex step(R"(^\[(\d+)\] step (\d+) size (\d+) gen \d+$)");
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_match(line, m, pid)) {
      slots[std::stoi(m[1])].emplace_back();
    } else if (std::regex_match(line, m, step) && !slots[std::stoi(m[1])].empty()) {
      slots[std::stoi(m[1])].back().steps.push_back({std::stoi(m[2]), std::stoi(m[3])});
    }
  }
  return slots;
}

// Each process committed consecutive steps, none twice and none skipped.
void expect_contiguous(const std::map<int, std::vector<Lifetime>>& slots,
                       const std::string& output) {
  for (const auto& [slot, lives] : slots) {
    for (const Lifetime& life : lives) {
      for (size_t i = 1; i < life.steps.size(); ++i) {
        EXPECT_EQ(life.steps[i].step, life.steps[i - 1].step + 1)
            << "rank " << slot << " skipped or repeated a step\n"
            << output;
      }
    }
  }
}

int last_step(const Lifetime& life) {
  return life.steps.empty() ? -1 : life.steps.back().step;
}

std::vector<std::string> elastic(const std::vector<std::string>& options, int kill_slot) {
  std::vector<std::string> args = {"--nproc-per-node", "3"};
  args.insert(args.end(), options.begin(), options.end());
  for (const char* a : {ELASTIC_TEST_RANK, "--steps", "30", "--kill-at-step", "5"}) {
    args.push_back(a);
  }
  args.push_back("--kill-slot");
  args.push_back(std::to_string(kill_slot));
  return args;
}

// (a) The killed rank is restarted and rejoins; the job shrinks to 2 and grows back to 3 (by
// step 15, when the survivors wait for it), and commits exactly steps 0..29 (the survivor
// rank 0 prints each once).
TEST(ElasticCohortrun, AKilledRankIsRestartedAndRejoinsWithoutLosingAStep) {
  std::vector<std::string> args =
      elastic({"--min-ranks", "2", "--max-ranks", "3", "--max-restarts", "1"}, 1);
  args.insert(args.end(), {"--join-after-generation", "2", "--grow-back-by-step", "15"});
  auto run = cohortrun(args, kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  const std::string& out = run.output();
  EXPECT_TRUE(contains(out,
                       "cohortrun: rank 1 left (killed by signal 9 (Killed)); restarting it "
                       "(restart 1 of 1)\n"))
      << out;
  EXPECT_TRUE(contains(out,
                       "[1] elastic env: COHORT_ELASTIC=1 COHORT_ELASTIC_MIN_RANKS=2 "
                       "COHORT_ELASTIC_MAX_RANKS=3 COHORT_ELASTIC_RESTART=1 "
                       "COHORT_STORE_HOSTED=1\n"))
      << out;
  EXPECT_TRUE(contains(out, "[0] membership: generation 2: rank 1 left; 2 ranks go on from step 5"))
      << out;
  const auto slots = lifetimes(out);
  expect_contiguous(slots, out);
  ASSERT_EQ(slots.at(0).size(), 1u) << out;
  ASSERT_EQ(slots.at(1).size(), 2u) << out;
  ASSERT_EQ(slots.at(2).size(), 1u) << out;
  EXPECT_EQ(last_step(slots.at(1)[0]), 4) << out;  // killed at the start of step 5
  for (const auto& [slot, lives] : slots) EXPECT_EQ(last_step(lives.back()), 29) << out;
  const std::vector<Step>& survivor = slots.at(0)[0].steps;
  ASSERT_EQ(survivor.size(), 30u) << out;
  EXPECT_EQ(survivor.front().step, 0) << out;
  // After the kill: size 2 until the restarted process joined, then 3 again to the end.
  size_t shrunk = 5;
  while (shrunk < survivor.size() && survivor[shrunk].size == 2) ++shrunk;
  EXPECT_GT(shrunk, 5u) << "the job never ran at size 2\n" << out;
  EXPECT_LE(shrunk, 16u) << "the restarted rank joined after step 15\n" << out;
  for (size_t i = 0; i < survivor.size(); ++i) {
    EXPECT_EQ(survivor[i].size, i < 5 || i >= shrunk ? 3 : 2) << "step " << i << "\n" << out;
  }
  EXPECT_EQ(slots.at(1)[1].steps.front().step, static_cast<int>(shrunk)) << out;
  expect_all_gone(printed_pids(out));
}

// (b) No restarts: the job finishes at size 2 and succeeds.
TEST(ElasticCohortrun, WithoutRestartsTheJobFinishesSmaller) {
  auto run = cohortrun(elastic({"--min-ranks", "2", "--max-restarts", "0"}, 1), kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  const std::string& out = run.output();
  EXPECT_TRUE(contains(out,
                       "cohortrun: rank 1 left (killed by signal 9 (Killed)); no restarts "
                       "left, the job goes on without it\n"))
      << out;
  EXPECT_TRUE(contains(out, "COHORT_ELASTIC_MAX_RANKS=<unset> COHORT_ELASTIC_RESTART=0")) << out;
  EXPECT_TRUE(contains(out, "[0] step 29 size 2 gen 2\n")) << out;
  EXPECT_TRUE(contains(out, "[2] step 29 size 2 gen 2\n")) << out;
  EXPECT_TRUE(contains(out, "cohortrun: rank 1 was killed by signal 9 (Killed) (local rank 1"))
      << out;
  EXPECT_TRUE(contains(out,
                       "job succeeded: 2 of 3 ranks succeeded (--min-ranks 2); given up: "
                       "rank(s) 1\n"))
      << out;
  const auto slots = lifetimes(out);
  expect_contiguous(slots, out);
  EXPECT_EQ(slots.at(0)[0].steps.size(), 30u) << out;
  expect_all_gone(printed_pids(out));
}

// (c) --min-ranks 3 of 3 and no restarts: the survivors wait for a third member until
// COHORT_ELASTIC_TIMEOUT_S, end with an ElasticError, and the job fails.
TEST(ElasticCohortrun, BelowMinRanksTheJobFails) {
  auto run = cohortrun(elastic({"--min-ranks", "3"}, 2), kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGKILL) << run.output();
  const std::string& out = run.output();
  for (const char* survivor : {"[0]", "[1]"}) {
    EXPECT_TRUE(contains(out, std::string(survivor) +
                                  " ElasticError: generation 2 cannot form: 2 member(s) arrived "
                                  "within the join timeout but the job needs at least 3"))
        << out;
  }
  EXPECT_TRUE(contains(out, "cohortrun: rank 0 exited with code 4")) << out;
  EXPECT_TRUE(contains(out,
                       "job failed: 0 of 3 ranks succeeded (--min-ranks 3); given up: "
                       "rank(s) 0, 1, 2; the first failure: rank 2 was killed by signal 9"))
      << out;
  expect_all_gone(printed_pids(out));
}

// A stop signal to cohortrun stops every rank, as without --min-ranks.
TEST(ElasticCohortrun, SigtermStopsEveryRank) {
  // A --stop-timeout past the wait below: the ranks must end on the SIGTERM itself.
  auto run = cohortrun({"--nproc-per-node", "3", "--min-ranks", "2", "--max-restarts", "3",
                        "--stop-timeout", "30", LAUNCH_TEST_RANK, "sleep"});
  while (printed_pids(run.output()).size() < 3) {
    ASSERT_FALSE(run.wait_for_line("[", kDeadline).empty()) << run.output();
  }
  run.kill(SIGTERM);
  ASSERT_EQ(run.wait(std::chrono::seconds(10)), 128 + SIGTERM) << run.output();
  EXPECT_TRUE(contains(run.output(), "job failed: cohortrun was interrupted by SIGTERM"))
      << run.output();
  EXPECT_FALSE(contains(run.output(), "restarting it")) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// A rank left stopped once the others have ended is killed after --stopped-timeout and given
// up; the job, finishing, does not restart it.
TEST(ElasticCohortrun, ARankLeftStoppedIsGivenUp) {
  auto run = cohortrun({"--nproc-per-node", "3", "--min-ranks", "2", "--max-restarts", "1",
                        "--stopped-timeout", "0", LAUNCH_TEST_RANK, "stop-alone", "1"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "cohortrun: rank 1 stayed stopped by signal 19"))
      << run.output();
  EXPECT_TRUE(contains(run.output(), "job succeeded: 2 of 3 ranks succeeded")) << run.output();
  EXPECT_FALSE(contains(run.output(), "restarting it")) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// (d) Usage errors of the new options: exit 2 and what to change.
TEST(ElasticCohortrun, BadOptionsAreRefused) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nproc-per-node", "2", "--min-ranks", "3"},
       "--min-ranks 3 is more than the 2 ranks started"},
      {{"--nproc-per-node", "2", "--min-ranks", "0"}, "--min-ranks"},
      {{"--nproc-per-node", "3", "--min-ranks", "2", "--max-ranks", "1"},
       "--max-ranks 1 is below --min-ranks 2"},
      {{"--nproc-per-node", "3", "--min-ranks", "1", "--max-ranks", "2"},
       "--max-ranks 2 is below the 3 ranks started"},
      {{"--nproc-per-node", "3", "--max-ranks", "3"}, "--max-ranks needs --min-ranks"},
      {{"--nproc-per-node", "3", "--min-ranks", "2", "--expendable", "1"},
       "--expendable cannot be given with --min-ranks"},
      {{"--nnodes", "2", "--nproc-per-node", "2", "--min-ranks", "2"},
       "--min-ranks with --nnodes > 1 is not supported yet"},
  };
  for (const auto& [options, message] : cases) {
    std::vector<std::string> args = options;
    args.push_back(ELASTIC_TEST_RANK);
    auto run = cohortrun(args, {"COHORT_JOB_TOKEN=elastic-launch-test"});
    EXPECT_EQ(run.wait(kDeadline), 2) << run.output();
    EXPECT_TRUE(contains(run.output(), message)) << message << "\n" << run.output();
    EXPECT_TRUE(printed_pids(run.output()).empty()) << run.output();
  }
}

}  // namespace
}  // namespace cohort
