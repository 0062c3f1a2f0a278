// cohortrun end to end: it starts ranks (launch_test_rank) that form a group with
// cohort::init(), and when one fails it stops the others, names the failed rank, exits
// non-zero and leaves no process behind; it forwards SIGTERM, restarts, and joins nodes.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "net/socket.h"
#include "run_cohortrun.h"
#include "support/process.h"
#include "transport/shm/shm_names.h"

namespace cohort {
namespace {

using std::chrono::seconds;
using testing::ChildProcess;
using testing::free_port;

TEST(Cohortrun, AllRanksSucceed) {
  auto run = cohortrun({"--nproc-per-node", "4", LAUNCH_TEST_RANK, "ok"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(contains(run.output(), "[" + std::to_string(rank) + "] sum 10")) << run.output();
  }
}

TEST(Cohortrun, ARankExitingNonZeroStopsTheJobAndIsNamed) {
  const auto start = std::chrono::steady_clock::now();
  auto run = cohortrun({"--nproc-per-node", "3", LAUNCH_TEST_RANK, "exit", "1", "3"});
  ASSERT_EQ(run.wait(kDeadline), 3) << run.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_TRUE(contains(run.output(), "cohortrun: rank 1 exited with code 3")) << run.output();
  EXPECT_TRUE(contains(run.output(), "last lines of rank 1")) << run.output();
  EXPECT_TRUE(contains(run.output(), "stopped rank(s) 0, 2")) << run.output();
  ASSERT_EQ(printed_pids(run.output()).size(), 3u) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

TEST(Cohortrun, AKilledRankStopsTheJobWithinTenSeconds) {
  const auto start = std::chrono::steady_clock::now();
  auto run = cohortrun({"--nproc-per-node", "2", LAUNCH_TEST_RANK, "kill", "0"});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGKILL) << run.output();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  EXPECT_TRUE(contains(run.output(), "rank 0 was killed by signal 9")) << run.output();
  ASSERT_EQ(printed_pids(run.output()).size(), 2u) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// The others time out waiting for rank 0 and abort (exit 134) while it cannot even exit: the
// summary leads with the stopped rank, not with the first rank to abort.
TEST(Cohortrun, AStoppedRankIsNamedAsTheCause) {
  auto run =
      cohortrun({"--nproc-per-node", "4", "--stop-timeout", "2", LAUNCH_TEST_RANK, "stop", "0"},
                {"COHORT_TIMEOUT_S=2"});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGSTOP) << run.output();
  EXPECT_TRUE(contains(run.output(), "job failed: rank 0 was stopped by signal 19"))
      << run.output();
  EXPECT_FALSE(contains(run.output(), "stopped rank(s) 0")) << run.output();
  ASSERT_EQ(printed_pids(run.output()).size(), 4u) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// Rank 2 runs on but never joins the barrier; the others' TimeoutErrors name it.
TEST(Cohortrun, TheRankTheOthersErrorsNameIsTheCause) {
  auto run =
      cohortrun({"--nproc-per-node", "3", LAUNCH_TEST_RANK, "hang", "2"}, {"COHORT_TIMEOUT_S=2"});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGABRT) << run.output();
  EXPECT_TRUE(contains(run.output(),
                       "job failed: rank 2 did not take part: the errors of the "
                       "other ranks name it"))
      << run.output();
  ASSERT_EQ(printed_pids(run.output()).size(), 3u) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// The /dev/shm entries (names) whose name starts with `prefix` (without its '/').
std::vector<std::string> shm_entries(const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = "/" + entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every rank leaves a segment under the job's name; rank 1 is killed, the others stopped.
// cohortrun removes them all, but not a segment of the job whose creator still runs.
TEST(Cohortrun, RemovesTheSharedMemoryTheRanksLeft) {
  const std::string token = "shm-leftover-test-" + std::to_string(::getpid());
  const std::string mine = shm_segment_name(token, ::getpid(), 7);
  const int fd = ::shm_open(mine.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << mine;
  ::close(fd);
  auto run = cohortrun({"--nproc-per-node", "3", LAUNCH_TEST_RANK, "leave-shm", "1"},
                       {"COHORT_JOB_TOKEN=" + token});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGKILL) << run.output();
  EXPECT_TRUE(contains(run.output(), "rank 1 was killed by signal 9")) << run.output();
  const std::regex created(R"(\] segment (\S+))");
  std::vector<std::string> left;
  for (auto it = std::sregex_iterator(run.output().begin(), run.output().end(), created);
       it != std::sregex_iterator(); ++it) {
    left.push_back((*it)[1]);
  }
  EXPECT_EQ(left.size(), 3u) << run.output();
  for (const std::string& name : left) {
    EXPECT_TRUE(contains(run.output(), "removed /dev/shm" + name)) << run.output();
  }
  EXPECT_EQ(shm_entries(shm_job_prefix(token)), std::vector<std::string>{mine});
  ::shm_unlink(mine.c_str());
}

TEST(Cohortrun, SigtermStopsEveryRank) {
  auto run = cohortrun({"--nproc-per-node", "3", LAUNCH_TEST_RANK, "sleep"});
  while (printed_pids(run.output()).size() < 3) {
    ASSERT_FALSE(run.wait_for_line("[", kDeadline).empty()) << run.output();
  }
  run.kill(SIGTERM);
  ASSERT_EQ(run.wait(seconds(10)), 128 + SIGTERM) << run.output();
  EXPECT_TRUE(contains(run.output(), "interrupted by SIGTERM")) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

TEST(Cohortrun, RestartsEveryRankAfterAFailure) {
  auto run = cohortrun(
      {"--nproc-per-node", "2", "--max-restarts", "1", LAUNCH_TEST_RANK, "fail-once", "1"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "rank 1 exited with code 3")) << run.output();
  EXPECT_TRUE(contains(run.output(), "restarting every rank (restart 1 of 1")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[0] restart 1")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[1] sum 3")) << run.output();
}

TEST(Cohortrun, GivesUpWhenRestartsRunOut) {
  auto run = cohortrun(
      {"--nproc-per-node", "2", "--max-restarts", "1", LAUNCH_TEST_RANK, "exit", "0", "4"});
  ASSERT_EQ(run.wait(kDeadline), 4) << run.output();
  EXPECT_TRUE(contains(run.output(), "job failed: rank 0 exited with code 4")) << run.output();
  EXPECT_EQ(printed_pids(run.output()).size(), 4u) << run.output();  // two attempts
  expect_all_gone(printed_pids(run.output()));
}

// Issue 58: a usage or configuration error (exit code 2, as the examples report a bad option)
// would fail every restart the same way: the job ends at once with it, restarts left or not.
TEST(Cohortrun, AUsageErrorIsNotRestarted) {
  auto run = cohortrun(
      {"--nproc-per-node", "2", "--max-restarts", "2", LAUNCH_TEST_RANK, "exit", "1", "2"});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(),
                       "not restarting: rank 1 exited with code 2, a usage or configuration "
                       "error, which a restart would repeat (--no-restart-exit-codes)"))
      << run.output();
  EXPECT_EQ(printed_pids(run.output()).size(), 2u) << run.output();  // one attempt
  // Asked to, it restarts that code too.
  auto told = cohortrun({"--nproc-per-node", "2", "--max-restarts", "1", "--no-restart-exit-codes",
                         "none", LAUNCH_TEST_RANK, "exit", "1", "2"});
  ASSERT_EQ(told.wait(kDeadline), 2) << told.output();
  EXPECT_TRUE(contains(told.output(), "restarting every rank (restart 1 of 1")) << told.output();
}

TEST(Cohortrun, AMissingProgramIsAClearError) {
  auto run = cohortrun({"--nproc-per-node", "2", "no-such-program-xyz"});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(), "cannot run 'no-such-program-xyz': no such program in PATH"))
      << run.output();
}

TEST(Cohortrun, APortInUseIsAClearError) {
  const auto taken = net::Listener::bind("", 0);
  auto run = cohortrun({"--master-port", std::to_string(taken.port()), LAUNCH_TEST_RANK, "ok"});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(), "already in use")) << run.output();
}

// --expendable: the rank's death is reported, and the job succeeds when the others do.
TEST(Cohortrun, AnExpendableRankMayFail) {
  auto run = cohortrun(
      {"--nproc-per-node", "3", "--expendable", "1,2", LAUNCH_TEST_RANK, "kill-alone", "1"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(),
                       "cohortrun: rank 1 was killed by signal 9 (Killed) (local rank 1, pid "))
      << run.output();
  EXPECT_TRUE(contains(run.output(), "it is --expendable: the others go on without it"))
      << run.output();
}

TEST(Cohortrun, ARankNotExpendableStillStopsTheJob) {
  auto run =
      cohortrun({"--nproc-per-node", "3", "--expendable", "2", LAUNCH_TEST_RANK, "kill", "1"});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGKILL) << run.output();
  EXPECT_TRUE(contains(run.output(), "job failed: rank 1 was killed by signal 9")) << run.output();
}

// Issue 35: a rank left stopped after every other rank ended kept cohortrun waiting forever.
// --expendable, it is killed after --stopped-timeout and the job succeeds.
TEST(Cohortrun, AnExpendableRankLeftStoppedIsEnded) {
  auto run = cohortrun({"--nproc-per-node", "3", "--expendable", "1", "--stopped-timeout", "1",
                        LAUNCH_TEST_RANK, "stop-alone", "1"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(),
                       "cohortrun: rank 1 stayed stopped by signal 19 (Stopped (signal)) for 1 s "
                       "after every other rank ended (--stopped-timeout); it is --expendable: "
                       "killed it\n"))
      << run.output();
  ASSERT_EQ(printed_pids(run.output()).size(), 3u) << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// Not --expendable: the same rank is the job's failure.
TEST(Cohortrun, ARankLeftStoppedFailsTheJob) {
  auto run = cohortrun(
      {"--nproc-per-node", "2", "--stopped-timeout", "0", LAUNCH_TEST_RANK, "stop-alone", "0"});
  ASSERT_EQ(run.wait(kDeadline), 128 + SIGSTOP) << run.output();
  EXPECT_TRUE(contains(run.output(), "job failed: rank 0 stayed stopped by signal 19"))
      << run.output();
  expect_all_gone(printed_pids(run.output()));
}

// Issue 35: HYBRID_SHARD could not be tried on one host, every rank having the same node.
TEST(Cohortrun, SimulatedNodesSplitTheRanksOfThisMachine) {
  auto run =
      cohortrun({"--nproc-per-node", "4", "--simulate-nodes", "2", LAUNCH_TEST_RANK, "nodes"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "[0] node 0 of 2, local rank 0 of 2")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[1] node 0 of 2, local rank 1 of 2")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[2] node 1 of 2, local rank 0 of 2")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[3] node 1 of 2, local rank 1 of 2")) << run.output();
  EXPECT_TRUE(contains(run.output(), "[3] sum 10")) << run.output();
}

TEST(Cohortrun, SimulatedNodesMustSplitTheRanksEvenly) {
  auto run = cohortrun({"--nproc-per-node", "4", "--simulate-nodes", "3", LAUNCH_TEST_RANK});
  EXPECT_NE(run.wait(kDeadline), 0);
  EXPECT_TRUE(contains(run.output(), "--simulate-nodes 3 must divide --nproc-per-node 4"))
      << run.output();
}

TEST(Cohortrun, AnExpendableRankOutsideTheJobIsRefused) {
  auto run = cohortrun({"--nproc-per-node", "2", "--expendable", "1,5", LAUNCH_TEST_RANK});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(), "--expendable 1,5: '5' is not a rank of this job of 2 ranks"))
      << run.output();
}

TEST(Cohortrun, BadOptionsAreRefused) {
  auto run = cohortrun({"--nnodes", "2", "--node-rank", "2", LAUNCH_TEST_RANK});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(), "--node-rank 2 must be below --nnodes 2")) << run.output();
  auto codes = cohortrun({"--no-restart-exit-codes", "2,300", LAUNCH_TEST_RANK});
  ASSERT_EQ(codes.wait(kDeadline), 2) << codes.output();
  EXPECT_TRUE(contains(codes.output(),
                       "--no-restart-exit-codes 2,300: '300' is not an exit code "
                       "from 1 to 255, or none"))
      << codes.output();
  auto etcd = cohortrun({"--rdzv-backend", "etcd", LAUNCH_TEST_RANK});
  ASSERT_EQ(etcd.wait(kDeadline), 2) << etcd.output();
  EXPECT_TRUE(contains(etcd.output(), "--rdzv-backend etcd needs --rdzv-endpoints"))
      << etcd.output();
  // Several nodes on etcd meet under the job's id, which each must be given.
  auto nodes = cohortrun({"--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoints",
                          "127.0.0.1:2379", LAUNCH_TEST_RANK},
                         {"COHORT_JOB_TOKEN=nodes-test"});
  ASSERT_EQ(nodes.wait(kDeadline), 2) << nodes.output();
  EXPECT_TRUE(contains(nodes.output(), "needs the job's id on every node")) << nodes.output();
}

#ifdef COHORT_BENCH
// cohortrun hosts the store (COHORT_STORE_HOSTED) and keys each attempt apart
// (COHORT_STORE_PREFIX): cohort-bench's ranks must use both, not start a store of their own.
TEST(Cohortrun, RunsCohortBench) {
  auto run = cohortrun({"--nproc-per-node", "2", COHORT_BENCH, "allreduce", "--max-bytes", "64K",
                        "--iters", "2", "--warmup", "1", "--timeout", "30"});
  ASSERT_EQ(run.wait(kDeadline), 0) << run.output();
  EXPECT_TRUE(contains(run.output(), "[0] # #wrong total: 0 (OK)")) << run.output();
}
#endif

// Two cohortrun invocations on this machine play two nodes of one job.
std::vector<std::string> node_args(int node_rank, int nnodes, uint16_t port,
                                   const std::vector<std::string>& rest) {
  std::vector<std::string> args = {
      "--nnodes",      std::to_string(nnodes), "--node-rank",    std::to_string(node_rank),
      "--master-port", std::to_string(port),   "--rdzv-timeout", "20"};
  args.insert(args.end(), rest.begin(), rest.end());
  return args;
}

const std::vector<std::string> kToken = {"COHORT_JOB_TOKEN=launch-test-secret"};

TEST(Cohortrun, TwoNodesFormOneJob) {
  const uint16_t port = free_port();
  const std::vector<std::string> rest = {"--nproc-per-node", "2", LAUNCH_TEST_RANK, "ok"};
  auto node0 = cohortrun(node_args(0, 2, port, rest), kToken);
  auto node1 = cohortrun(node_args(1, 2, port, rest), kToken);
  ASSERT_EQ(node1.wait(kDeadline), 0) << node1.output();
  ASSERT_EQ(node0.wait(kDeadline), 0) << node0.output();
  EXPECT_TRUE(contains(node0.output(), "[1] sum 10")) << node0.output();
  EXPECT_TRUE(contains(node1.output(), "[3] sum 10")) << node1.output();
}

TEST(Cohortrun, AFailureOnOneNodeStopsTheOther) {
  const uint16_t port = free_port();
  const std::vector<std::string> rest = {
      "--nproc-per-node", "1", LAUNCH_TEST_RANK, "exit", "1", "5"};
  auto node0 = cohortrun(node_args(0, 2, port, rest), kToken);
  auto node1 = cohortrun(node_args(1, 2, port, rest), kToken);
  ASSERT_EQ(node1.wait(kDeadline), 5) << node1.output();
  ASSERT_NE(node0.wait(kDeadline), 0) << node0.output();
  EXPECT_TRUE(contains(node0.output(), "node 1: rank 1 exited with code 5")) << node0.output();
  expect_all_gone(printed_pids(node0.output()));
}

TEST(Cohortrun, ANodeThatNeverArrivesIsNamed) {
  const uint16_t port = free_port();
  std::vector<std::string> args = node_args(0, 3, port, {LAUNCH_TEST_RANK, "ok"});
  args[7] = "2";  // --rdzv-timeout
  auto node0 = cohortrun(args, kToken);
  args[3] = "1";  // --node-rank
  auto node1 = cohortrun(args, kToken);
  ASSERT_EQ(node0.wait(kDeadline), 1) << node0.output();
  EXPECT_TRUE(contains(node0.output(), "node rank(s) 2 never arrived")) << node0.output();
  EXPECT_NE(node1.wait(kDeadline), 0) << node1.output();
}

TEST(Cohortrun, NodesMustRunAsManyRanksEach) {
  const uint16_t port = free_port();
  auto node0 =
      cohortrun(node_args(0, 2, port, {"--nproc-per-node", "2", LAUNCH_TEST_RANK, "ok"}), kToken);
  auto node1 =
      cohortrun(node_args(1, 2, port, {"--nproc-per-node", "1", LAUNCH_TEST_RANK, "ok"}), kToken);
  ASSERT_EQ(node0.wait(kDeadline), 2) << node0.output();
  EXPECT_TRUE(contains(node0.output(), "give every node the same --nproc-per-node"))
      << node0.output();
  EXPECT_NE(node1.wait(kDeadline), 0) << node1.output();
}

TEST(Cohortrun, TwoNodesWithOneNodeRankAreRefused) {
  const uint16_t port = free_port();
  std::vector<std::string> args = node_args(0, 3, port, {LAUNCH_TEST_RANK, "ok"});
  args[7] = "2";  // --rdzv-timeout: node 2 never comes
  auto node0 = cohortrun(args, kToken);
  args[3] = "1";  // --node-rank
  auto first = cohortrun(args, kToken);
  auto second = cohortrun(args, kToken);
  const int codes[] = {first.wait(kDeadline), second.wait(kDeadline)};
  const std::string both = first.output() + second.output();
  EXPECT_TRUE(codes[0] == 2 || codes[1] == 2) << both;
  EXPECT_TRUE(contains(both, "another node already joined as --node-rank 1")) << both;
  EXPECT_NE(node0.wait(kDeadline), 0) << node0.output();
}

TEST(Cohortrun, SeveralNodesNeedAJobToken) {
  auto run =
      cohortrun(node_args(0, 2, free_port(), {LAUNCH_TEST_RANK, "ok"}), {"COHORT_JOB_TOKEN="});
  ASSERT_EQ(run.wait(kDeadline), 2) << run.output();
  EXPECT_TRUE(contains(run.output(), "COHORT_JOB_TOKEN")) << run.output();
}

TEST(Cohortrun, AnUnreachableMasterIsAClearError) {
  std::vector<std::string> args = node_args(1, 2, free_port(), {LAUNCH_TEST_RANK, "ok"});
  args[7] = "1";  // --rdzv-timeout
  auto run = cohortrun(args, kToken);
  ASSERT_EQ(run.wait(kDeadline), 1) << run.output();
  EXPECT_TRUE(contains(run.output(), "cannot reach node 0 within 1 s")) << run.output();
}

}  // namespace
}  // namespace cohort
