// cohortrun --min-ranks (elastic mode) end to end, with ranks (elastic_test_rank) that train
// committed steps over cohort::ElasticGroup: a killed rank does not stop the others, its slot
// is restarted alone and the new process joins the running job at a step boundary; no
// committed step is lost or done twice; below --min-ranks the survivors end with an
// ElasticError. Each step's output line says the generation's size, so the tests read the
// job's membership from what the ranks printed.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "run_cohortrun.h"
#include "support/etcd_cluster.h"

namespace cohort {
namespace {

using testing::EtcdCluster;
using testing::free_port;

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
  const std::regex pid(R"(^\[slot (\d+)\] pid \d+$)");
  const std::regex step(R"(^\[slot (\d+)\] step (\d+) size (\d+) gen \d+$)");
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

// The output's last line (cohortrun's headline at the end of a job).
std::string last_line(std::string output) {
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return output.substr(output.rfind('\n') + 1);  // npos + 1: the whole of a single line
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
// rank 0 prints each once). The ranks meet in cohortrun's store, or where `store_options` say.
void expect_a_killed_rank_restarted_and_rejoined(const std::vector<std::string>& store_options) {
  std::vector<std::string> options = {"--min-ranks",    "2", "--max-ranks", "3",
                                      "--max-restarts", "1"};
  options.insert(options.end(), store_options.begin(), store_options.end());
  std::vector<std::string> args = elastic(options, 1);
  args.insert(args.end(), {"--join-after-generation", "2", "--grow-back-by-step", "15"});
  auto run = cohortrun(args, kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  const std::string& out = run.output();
  EXPECT_TRUE(contains(out,
                       "cohortrun: slot 1 left (killed by signal 9 (Killed)); restarting it "
                       "(restart 1 of 1)\n"))
      << out;
  EXPECT_TRUE(contains(out,
                       "[slot 1] elastic env: COHORT_ELASTIC=1 COHORT_ELASTIC_MIN_RANKS=2 "
                       "COHORT_ELASTIC_MAX_RANKS=3 COHORT_ELASTIC_RESTART=1 "
                       "COHORT_STORE_HOSTED=1\n"))
      << out;
  EXPECT_TRUE(
      contains(out, "[slot 0] membership: generation 2: rank 1 left; 2 ranks go on from step 5"))
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

TEST(ElasticCohortrun, AKilledRankIsRestartedAndRejoinsWithoutLosingAStep) {
  expect_a_killed_rank_restarted_and_rejoined({});
}

// --rdzv-backend etcd: the ranks meet in the test's etcd cluster, not in cohortrun's store.
TEST(ElasticCohortrun, OnEtcdAKilledRankIsRestartedAndRejoins) {
  EtcdCluster cluster;
  expect_a_killed_rank_restarted_and_rejoined(
      {"--rdzv-backend", "etcd", "--rdzv-endpoints", cluster.endpoints()});
}

// (b) No restarts: the job finishes at size 2 and succeeds.
TEST(ElasticCohortrun, WithoutRestartsTheJobFinishesSmaller) {
  auto run = cohortrun(elastic({"--min-ranks", "2", "--max-restarts", "0"}, 1), kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  const std::string& out = run.output();
  EXPECT_TRUE(contains(out,
                       "cohortrun: slot 1 left (killed by signal 9 (Killed)); no restarts "
                       "left, the job goes on without it\n"))
      << out;
  EXPECT_TRUE(contains(out, "COHORT_ELASTIC_MAX_RANKS=<unset> COHORT_ELASTIC_RESTART=0")) << out;
  EXPECT_TRUE(contains(out, "[slot 0] step 29 size 2 gen 2\n")) << out;
  EXPECT_TRUE(contains(out, "[slot 2] step 29 size 2 gen 2\n")) << out;
  EXPECT_TRUE(contains(out, "cohortrun: slot 1 was killed by signal 9 (Killed) (local rank 1"))
      << out;
  EXPECT_TRUE(contains(out,
                       "job succeeded: 2 of 3 ranks succeeded (--min-ranks 2); given up: "
                       "slot(s) 1\n"))
      << out;
  const auto slots = lifetimes(out);
  expect_contiguous(slots, out);
  EXPECT_EQ(slots.at(0)[0].steps.size(), 30u) << out;
  expect_all_gone(printed_pids(out));
}

// Issue 58: every slot failing with a usage error (exit code 2) is given up at once, not
// restarted until --max-restarts runs out (9 processes and 15 s before), and the job ends with
// that exit code within seconds.
TEST(ElasticCohortrun, AUsageErrorOnEverySlotEndsTheJobAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  auto run = cohortrun({"--nproc-per-node", "3", "--min-ranks", "2", "--max-restarts", "3",
                        LAUNCH_TEST_RANK, "all-exit", "2"},
                       kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  const std::string& out = run.output();
  EXPECT_TRUE(contains(out,
                       "slot 1 left (exited with code 2); exit code 2 is a usage or "
                       "configuration error, which a restart would repeat, so it is not "
                       "restarted (--no-restart-exit-codes)"))
      << out;
  EXPECT_FALSE(contains(out, "restarting it")) << out;
  EXPECT_EQ(printed_pids(out).size(), 3u) << out;  // no slot started twice
}

// (c) --min-ranks 3 of 3 and no restarts: the survivors wait for a third member until
// COHORT_ELASTIC_TIMEOUT_S, end with an ElasticError, and the job fails.
TEST(ElasticCohortrun, BelowMinRanksTheJobFails) {
  auto run = cohortrun(elastic({"--min-ranks", "3"}, 2), kFastEnv);
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGKILL) << run.output();
  const std::string& out = run.output();
  for (const char* survivor : {"[slot 0]", "[slot 1]"}) {
    EXPECT_TRUE(contains(out, std::string(survivor) +
                                  " ElasticError: generation 2 cannot form: 2 member(s) arrived "
                                  "within the join timeout but the job needs at least 3"))
        << out;
  }
  EXPECT_TRUE(contains(out, "cohortrun: slot 0 exited with code 4")) << out;
  // The kill is listed, but the headline (the last line) names the cause: too few members.
  EXPECT_TRUE(contains(out, "cohortrun: slot 2 was killed by signal 9 (Killed) (local rank 2"))
      << out;
  EXPECT_TRUE(contains(out,
                       "cohortrun: 0 of 3 ranks succeeded (--min-ranks 3); given up: "
                       "slot(s) 0, 1, 2; the first failure: slot 2 was killed by signal 9"))
      << out;
  EXPECT_EQ(last_line(out),
            "cohortrun: job failed: too few members left: slot 2 was given up (killed by signal 9 "
            "(Killed)), which left 2 of 3 slots, fewer than --min-ranks 3")
      << out;
  expect_all_gone(printed_pids(out));
}

// Each failed process of a slot is listed (with its restart) with its own last lines, not with
// those its predecessor in the slot printed.
TEST(ElasticCohortrun, TheSummaryShowsEachFailedProcesssOwnLines) {
  auto run = cohortrun(
      {"--nproc-per-node", "1", "--min-ranks", "1", "--max-restarts", "1", "/bin/sh", "-c",
       "echo process $COHORT_ELASTIC_RESTART; exit $((3 + COHORT_ELASTIC_RESTART))"});
  ASSERT_EQ(run.wait(kDeadline), 3) << run.output();
  const std::string& out = run.output();
  const std::regex first(
      R"(cohortrun: slot 0 exited with code 3 \(local rank 0 on node 0, pid \d+, restart 0\)\n)"
      R"(cohortrun: last lines of slot 0:\n    process 0\ncohortrun: )");
  const std::regex second(
      R"(cohortrun: slot 0 exited with code 4 \(local rank 0 on node 0, pid \d+, restart 1\)\n)"
      R"(cohortrun: last lines of slot 0:\n    process 1\ncohortrun: )");
  EXPECT_TRUE(std::regex_search(out, first)) << out;
  EXPECT_TRUE(std::regex_search(out, second)) << out;
  EXPECT_TRUE(contains(out, "[slot 0] process 0\n")) << out;
  EXPECT_TRUE(contains(out, "[slot 0] process 1\n")) << out;
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
  EXPECT_TRUE(contains(run.output(), "cohortrun: slot 1 stayed stopped by signal 19"))
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
      {{"--nnodes", "1", "--node-rank", "1", "--nproc-per-node", "2", "--min-ranks", "2"},
       "--node-rank 1 with --nnodes 1: a job of one node keeps its store on loopback"},
      {{"--nnodes", "2", "--node-rank", "2", "--nproc-per-node", "2"},
       "--node-rank 2 must be below --nnodes 2 (a node beyond --nnodes can only join an elastic "
       "job: --min-ranks)"},
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

// Several nodes: cohortrun invocations on this machine play the nodes of one job, each with
// its own COHORT_NODE_ID, so that its ranks form a node of their own (TCP to the other nodes'
// ranks, shared memory only inside it).
const char* const kToken = "COHORT_JOB_TOKEN=elastic-nodes-test";

std::vector<std::string> node_env(int node) {
  std::vector<std::string> env = kFastEnv;
  env.push_back(kToken);
  env.push_back("COHORT_NODE_ID=node" + std::to_string(node));
  return env;
}

// cohortrun for node `node` of a 2-node job at `port` (or in the store `store_args` name), 2
// ranks each (--min-ranks 2, a restart each), running elastic_test_rank with `rank_args` (30
// steps).
testing::ChildProcess node(int node, uint16_t port, const std::vector<std::string>& rank_args,
                           std::vector<std::string> env = {},
                           const std::vector<std::string>& store_args = {}) {
  std::vector<std::string> args = store_args;
  args.insert(args.end(), {"--nnodes", "2", "--node-rank", std::to_string(node)});
  args.insert(args.end(), {"--master-port", std::to_string(port), "--nproc-per-node", "2",
                           "--min-ranks", "2", "--max-restarts", "1", "--node-timeout", "2",
                           "--rdzv-timeout", "20", ELASTIC_TEST_RANK, "--steps", "30"});
  args.insert(args.end(), rank_args.begin(), rank_args.end());
  if (env.empty()) env = node_env(node);
  return cohortrun(args, env);
}

// node() with the job's store on `cluster` under job id `job_id` (node()'s port goes unused).
testing::ChildProcess etcd_node(int n, const EtcdCluster& cluster, const std::string& job_id,
                                const std::vector<std::string>& rank_args) {
  std::vector<std::string> env = node_env(n);
  env.push_back("COHORT_JOB_ID=" + job_id);
  return node(n, free_port(), rank_args, env,
              {"--rdzv-backend", "etcd", "--rdzv-endpoints", cluster.endpoints()});
}

// The steps rank `rank` committed in its first process (a survivor's whole record).
std::vector<Step> steps_of(const std::string& output, int rank) {
  const auto slots = lifetimes(output);
  const auto it = slots.find(rank);
  return it == slots.end() || it->second.empty() ? std::vector<Step>{} : it->second[0].steps;
}

// The survivors `ranks` committed steps 0..29 between them, each at the size `size_at` gives.
// Each committed its steps in order, none twice; one may miss the step a failure broke on it
// alone (its peers committed it at the vote, Note [Elastic commit]: it goes on from theirs).
template <typename SizeAt>
void expect_every_step_once(const std::string& output, const std::vector<int>& ranks,
                            SizeAt size_at) {
  std::vector<bool> committed(30, false);
  for (int rank : ranks) {
    const std::vector<Step> steps = steps_of(output, rank);
    ASSERT_FALSE(steps.empty()) << "rank " << rank << " committed nothing\n" << output;
    EXPECT_EQ(steps.back().step, 29) << "rank " << rank << "\n" << output;
    int missed = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      const int expected = i == 0 ? 0 : steps[i - 1].step + 1;
      if (steps[i].step == expected + 1) ++missed;
      EXPECT_TRUE(steps[i].step == expected || steps[i].step == expected + 1)
          << "rank " << rank << " committed step " << steps[i].step << " after " << expected - 1
          << "\n"
          << output;
      EXPECT_EQ(steps[i].size, size_at(steps[i].step))
          << "rank " << rank << " step " << steps[i].step << "\n"
          << output;
      if (steps[i].step >= 0 && steps[i].step < 30) committed[steps[i].step] = true;
    }
    EXPECT_LE(missed, 1) << "rank " << rank << "\n" << output;
  }
  for (int s = 0; s < 30; ++s) EXPECT_TRUE(committed[s]) << "no survivor committed step " << s;
}

// The step the survivors (slot `slot`'s log) went on from after losing the ranks `left` of
// generation 1, which die as they begin step 5 having committed step 4: 5, or 4 when a victim's
// last vote message died with it and the survivors did not commit step 4 (Note [Elastic
// commit]). -1 (and a test failure) when no such line was printed.
int went_on_from(const std::string& out, int slot, const std::string& left) {
  const std::string line = "[slot " + std::to_string(slot) + "] membership: generation 2: ranks " +
                           left + " left; 2 ranks go on from step ";
  const size_t at = out.find(line);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no line '" << line << "'\n" << out;
    return -1;
  }
  const int from = std::atoi(out.c_str() + at + line.size());
  EXPECT_TRUE(from == 4 || from == 5) << out;
  return from;
}

// A node lost with its cohortrun and ranks (all SIGKILLed at step 5): the other node's ranks
// form a generation of 2 and commit every step once; its cohortrun says so and succeeds.
TEST(ElasticCohortrunNodes, ALostNodeLeavesTheOtherNodeRunning) {
  const uint16_t port = free_port();
  const std::vector<std::string> kill = {"--kill-at-step", "5", "--kill-node", "1"};
  auto node0 = node(0, port, kill);
  auto node1 = node(1, port, kill);
  ASSERT_EQ(node1.wait(kDeadline), 128 + SIGKILL) << node1.output();
  ASSERT_EQ(node0.wait(kDeadline), 0) << node0.output() << node1.output();
  const std::string& out = node0.output();
  const int from = went_on_from(out, 0, "2 and 3");
  EXPECT_TRUE(contains(out, "cohortrun: the job goes on with 2 ranks (generation 2: 2 left)\n"))
      << out;
  // Whether the survivors had formed generation 2 when cohortrun noticed the silence depends on
  // timing (a loaded machine): either ending is right, and the line above says what followed.
  const std::string lost =
      "cohortrun: node 1 left (its cohortrun was not heard from for 2 s (--node-timeout): it was "
      "killed or its host is gone); the job goes on ";
  EXPECT_TRUE(contains(out, lost + "with 2 ranks\n") ||
              contains(out, lost + "without its ranks once the others notice\n"))
      << out;
  expect_every_step_once(out, {0, 1}, [from](int s) { return s < from ? 4 : 2; });
  const std::string both = out + node1.output();
  EXPECT_FALSE(contains(both, "[slot 2] step 5 ")) << both;
  expect_all_end(printed_pids(both), kDeadline);
}

// After node 1 is lost, a third cohortrun joins as node 2: its ranks become members at a step
// boundary (the job runs at 2, then at 4 again), and every node's ranks finish the job.
TEST(ElasticCohortrunNodes, ANewNodeJoinsTheRunningJob) {
  const uint16_t port = free_port();
  const std::vector<std::string> rank_args = {"--kill-at-step",      "5",  "--kill-node", "1",
                                              "--grow-back-by-step", "15", "--grow-to",   "4"};
  auto node0 = node(0, port, rank_args);
  auto node1 = node(1, port, rank_args);
  ASSERT_EQ(node1.wait(kDeadline), 128 + SIGKILL) << node1.output();
  // Node 2 joins once the survivors went on without node 1 (their generation 2 may form before
  // or after node 0's cohortrun reports node 1's silence: the rendezvous waits `settle` for the
  // rank no error named).
  ASSERT_FALSE(
      node0.wait_for_line("cohortrun: the job goes on with 2 ranks (generation 2", kDeadline)
          .empty())
      << node0.output();
  auto node2 = node(2, port, rank_args);
  ASSERT_EQ(node2.wait(kDeadline), 0) << node2.output() << node0.output();
  ASSERT_EQ(node0.wait(kDeadline), 0) << node0.output() << node2.output();
  const std::string& out = node0.output();
  EXPECT_TRUE(contains(node2.output(),
                       "cohortrun: node 2 joins the running job (generation 2, "
                       "2 ranks): its slots 4 to 5 become members"))
      << node2.output();
  EXPECT_TRUE(contains(node2.output(), "[slot 4] elastic env: COHORT_ELASTIC=1")) << node2.output();
  EXPECT_TRUE(contains(out, "cohortrun: node 1 left")) << out;
  EXPECT_TRUE(contains(out, "cohortrun: node 2 (")) << out;
  EXPECT_TRUE(contains(out,
                       ") joined the job with 2 ranks; they become members at the next "
                       "step boundary\n"))
      << out;
  EXPECT_TRUE(contains(out, "cohortrun: the job goes on with 4 ranks (generation 3: 2 joined)\n"))
      << out;
  EXPECT_TRUE(contains(out,
                       "[slot 0] membership: generation 3: 2 ranks joined (now 2 and 3); 4 ranks "
                       "go on from step 16\n"))
      << out;
  // Size 4 to step 4, 2 from the loss to step 15 (the survivors waited there), 4 again after.
  expect_every_step_once(out, {0, 1}, [](int s) { return s < 5 || s > 15 ? 4 : 2; });
  for (int rank : {4, 5}) {
    const std::vector<Step> steps = steps_of(node2.output(), rank);
    ASSERT_EQ(steps.size(), 14u) << node2.output();
    EXPECT_EQ(steps.front().step, 16) << node2.output();
    EXPECT_EQ(steps.back().step, 29) << node2.output();
    EXPECT_EQ(steps.back().size, 4) << node2.output();
  }
  expect_all_end(printed_pids(out + node1.output() + node2.output()), kDeadline);
}

// Node 0 hosts the store, the job's single point of failure: when it is lost (its ranks kill
// their cohortrun and themselves at step 5), node 1 stops its ranks, restarts none, and fails.
TEST(ElasticCohortrunNodes, LosingNodeZeroEndsTheJob) {
  const uint16_t port = free_port();
  const std::vector<std::string> kill = {"--kill-at-step", "5", "--kill-node", "0"};
  auto node0 = node(0, port, kill);
  auto node1 = node(1, port, kill);
  ASSERT_EQ(node0.wait(kDeadline), 128 + SIGKILL) << node0.output();
  ASSERT_EQ(node1.wait(kDeadline), 1) << node1.output();
  const std::string& out = node1.output();
  EXPECT_TRUE(contains(out, "cohortrun: job failed: lost node 0's store: ")) << out;
  EXPECT_FALSE(contains(out, "restarting it")) << out;
  expect_all_end(printed_pids(node0.output() + out), kDeadline);
}

// With the store on etcd no node holds it: losing node 0 (its cohortrun and ranks SIGKILLed at
// step 5) costs the job what losing any other node does. Node 1's ranks go on at 2 and commit
// every step once, and its cohortrun succeeds.
TEST(ElasticCohortrunNodes, OnEtcdLosingNodeZeroCostsWhatLosingAnyNodeDoes) {
  EtcdCluster cluster;
  const std::vector<std::string> kill = {"--kill-at-step", "5", "--kill-node", "0"};
  auto node0 = etcd_node(0, cluster, "elastic-nodes-on-etcd", kill);
  auto node1 = etcd_node(1, cluster, "elastic-nodes-on-etcd", kill);
  ASSERT_EQ(node0.wait(kDeadline), 128 + SIGKILL) << node0.output();
  ASSERT_EQ(node1.wait(kDeadline), 0) << node1.output() << node0.output();
  const std::string& out = node1.output();
  const int from = went_on_from(out, 2, "0 and 1");
  EXPECT_TRUE(contains(out, "cohortrun: the job goes on with 2 ranks (generation 2: 2 left)\n"))
      << out;
  EXPECT_FALSE(contains(out, "lost the etcd cluster")) << out;
  expect_every_step_once(out, {2, 3}, [from](int s) { return s < from ? 4 : 2; });
  expect_all_end(printed_pids(node0.output() + out), kDeadline);
}

// Losing etcd's quorum (two of its three members killed while the job trains) ends every node:
// its cohortrun cannot reach the store within --node-timeout, names etcd, stops its ranks and
// fails; nothing of the job is left running.
TEST(ElasticCohortrunNodes, OnEtcdLosingTheQuorumEndsEveryNodeWithAnErrorNamingEtcd) {
  EtcdCluster cluster;
  const std::vector<std::string> endless = {"--steps", "1000000"};
  auto node0 = etcd_node(0, cluster, "elastic-nodes-quorum", endless);
  auto node1 = etcd_node(1, cluster, "elastic-nodes-quorum", endless);
  ASSERT_FALSE(node0.wait_for_line("[slot 0] step 9 ", kDeadline).empty()) << node0.output();
  cluster.kill(0);
  cluster.kill(1);
  ASSERT_EQ(node0.wait(kDeadline), 1) << node0.output();
  ASSERT_EQ(node1.wait(kDeadline), 1) << node1.output();
  for (const std::string& out : {node0.output(), node1.output()}) {
    EXPECT_TRUE(contains(
        out, "cohortrun: job failed: lost the etcd cluster (" + cluster.endpoints() + "): "))
        << out;
  }
  expect_all_end(printed_pids(node0.output() + node1.output()), kDeadline);
}

// Bad nodes while the job waits (at step 10) for 2 more ranks: one with another job token, one
// with another job id and one with a node rank in use are refused with a clear error; the job goes
// on, and a good node then joins it.
TEST(ElasticCohortrunNodes, ANodeOfAnotherJobIsRefusedAndTheJobGoesOn) {
  const uint16_t port = free_port();
  const std::vector<std::string> rank_args = {"--grow-back-by-step", "10", "--grow-to", "6"};
  auto node0 = node(0, port, rank_args);
  auto node1 = node(1, port, rank_args);
  ASSERT_FALSE(node0.wait_for_line("[slot 0] step 9 ", kDeadline).empty()) << node0.output();
  std::vector<std::string> wrong_token = kFastEnv;
  wrong_token.insert(wrong_token.end(), {"COHORT_JOB_TOKEN=another-job", "COHORT_NODE_ID=node2"});
  auto stranger = node(2, port, rank_args, wrong_token);
  ASSERT_EQ(stranger.wait(kDeadline), 1) << stranger.output();
  EXPECT_TRUE(contains(stranger.output(), "refused this process's job token")) << stranger.output();
  std::vector<std::string> wrong_job = node_env(2);
  wrong_job.push_back("COHORT_JOB_ID=another-job-id");
  auto other_job = node(2, port, rank_args, wrong_job);
  ASSERT_EQ(other_job.wait(kDeadline), 2) << other_job.output();
  EXPECT_TRUE(contains(other_job.output(), "was started for that job, but node 0's store at"))
      << other_job.output();
  auto twin = node(1, port, rank_args, node_env(3));
  ASSERT_EQ(twin.wait(kDeadline), 2) << twin.output();
  EXPECT_TRUE(contains(twin.output(), "another node already joined as --node-rank 1"))
      << twin.output();
  EXPECT_TRUE(printed_pids(stranger.output() + other_job.output() + twin.output()).empty());
  auto node2 = node(2, port, rank_args);
  ASSERT_EQ(node2.wait(kDeadline), 0) << node2.output() << node0.output();
  ASSERT_EQ(node1.wait(kDeadline), 0) << node1.output();
  ASSERT_EQ(node0.wait(kDeadline), 0) << node0.output();
  expect_every_step_once(node0.output(), {0, 1}, [](int s) { return s <= 10 ? 4 : 6; });
  expect_every_step_once(node1.output(), {2, 3}, [](int s) { return s <= 10 ? 4 : 6; });
  EXPECT_TRUE(contains(node2.output(), "[slot 5] step 29 size 6 gen 2\n")) << node2.output();
  expect_all_end(printed_pids(node0.output() + node1.output() + node2.output()), kDeadline);
}

}  // namespace
}  // namespace cohort
