// What a group says when it is made (group_report.h): at COHORT_LOG_LEVEL=info one line per
// group, on its rank 0, naming the world size, the backend, the transport per class of peers,
// the nodes and their ranks, and the cost model; nothing at the default level.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/tcp_store.h"
#include "support/log_capture.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using testing::LogCapture;

GroupOptions named(const std::string& name) {
  GroupOptions options = testing::quick_options();
  options.name = name;
  return options;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The one line of group `name`; fails the test when there is not exactly one.
std::string line_of(const LogCapture& capture, const std::string& name) {
  const auto lines = capture.info_lines("group '" + name + "':");
  EXPECT_EQ(lines.size(), 1u) << "lines of group " << name;
  return lines.empty() ? "" : lines.front();
}

TEST(GroupReport, TcpGroupOnOneHostNamesSharedMemoryAndTcp) {
  LogCapture capture;
  auto groups = testing::make_tcp_groups(3, named("report-tcp"));
  const std::string line = line_of(capture, "report-tcp");
  EXPECT_TRUE(has(line, "3 ranks on 1 node (node 0: ranks 0-2)")) << line;
  EXPECT_TRUE(has(line, "backend: cohort's algorithms over tcp")) << line;
  EXPECT_TRUE(has(line, "inside a node: shared memory for allreduce")) << line;
  EXPECT_TRUE(has(line, "across nodes: none (one node)")) << line;
  EXPECT_TRUE(has(line, "allreduce algorithm by size: 4 KiB ")) << line;
  EXPECT_TRUE(has(line, "cost model from ")) << line;
}

TEST(GroupReport, WithoutSharedMemoryInsideANodeItIsTcp) {
  LogCapture capture;
  GroupOptions options = named("report-noshm");
  options.shared_memory = false;
  auto groups = testing::make_tcp_groups(2, options);
  EXPECT_TRUE(
      has(line_of(capture, "report-noshm"), "inside a node: tcp (shared memory off: COHORT_SHM=0)"))
      << line_of(capture, "report-noshm");
}

// Issue 35: a subgroup whose ranks share a host shares memory too, whatever ranks it leaves out.
TEST(GroupReport, SubgroupsOfOneHostShareMemory) {
  LogCapture capture;
  auto groups = testing::make_tcp_groups(4, named("report-split"));
  std::vector<std::shared_ptr<Group>> subs(4);
  testing::run_ranks(4, [&](int rank) {
    auto& group = *groups[static_cast<size_t>(rank)];
    subs[static_cast<size_t>(rank)] = group.split(rank % 2, -rank);  // {2, 0} and {3, 1}
    std::vector<float> data(1 << 16, static_cast<float>(rank));      // past the small sizes
    subs[static_cast<size_t>(rank)]->allreduce(make_buffer(data));
    EXPECT_EQ(data.front(), rank % 2 == 0 ? 2.0f : 4.0f);
    EXPECT_EQ(data.back(), rank % 2 == 0 ? 2.0f : 4.0f);
    EXPECT_TRUE(subs[static_cast<size_t>(rank)]->allocate_registered(4096)->shared());
  });
  for (const char* name : {"report-split/split0/c0", "report-split/split0/c1"}) {
    EXPECT_TRUE(has(line_of(capture, name), "inside a node: shared memory for allreduce"))
        << line_of(capture, name);
  }
}

TEST(GroupReport, TwoNodesNameTheirRanksAndTcpAcross) {
  LogCapture capture;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::shared_ptr<Group>> groups(4);
  testing::run_ranks(4, [&](int rank) {
    GroupOptions options = named("report-nodes");
    options.host = "127.0.0.1";
    options.node_id = rank < 2 ? "host-a" : "host-b";  // two simulated hosts
    groups[static_cast<size_t>(rank)] = Group::create(store, rank, 4, options);
  });
  const std::string line = line_of(capture, "report-nodes");
  EXPECT_TRUE(has(line, "4 ranks on 2 nodes (node 0: ranks 0-1; node 1: ranks 2-3)")) << line;
  EXPECT_TRUE(has(line, "shared memory inside hierarchical allreduce")) << line;
  EXPECT_TRUE(has(line, "across nodes: tcp")) << line;
}

TEST(GroupReport, InprocGroupAndItsSubgroupsEachSayItOnce) {
  LogCapture capture;
  auto groups = testing::make_inproc_groups(4, named("report-inproc"));
  std::vector<std::shared_ptr<Group>> subs(4);
  testing::run_ranks(4, [&](int rank) {
    subs[static_cast<size_t>(rank)] = groups[static_cast<size_t>(rank)]->split(rank % 2, rank);
  });
  const std::string line = line_of(capture, "report-inproc");
  EXPECT_TRUE(has(line, "4 ranks on 1 node")) << line;
  EXPECT_TRUE(has(line, "backend: cohort's algorithms over inproc")) << line;
  EXPECT_TRUE(has(line, "transport: in-process")) << line;
  EXPECT_EQ(capture.info_lines("group 'report-inproc/split").size(), 2u);
  EXPECT_TRUE(has(line_of(capture, "report-inproc/split0/c1"), "2 ranks on 1 node"))
      << line_of(capture, "report-inproc/split0/c1");
}

// Rank 0 reads the calibration; a subgroup whose rank 0 is another rank still names it.
TEST(GroupReport, NamesTheCalibrationFileEvenOnASubgroupsRankZero) {
  const std::string path = testing::fresh_temp_dir("report-cost") + "/cost_model.json";
  std::ofstream(path) << R"({"version": 1, "tcp": {"alpha_us": 40, "gbytes_per_s": 1.5},
    "shm": {"alpha_us": 0.5, "gbytes_per_s": 20}, "reduce": {"gbytes_per_s": 25}})";
  ASSERT_EQ(setenv("COHORT_COST_MODEL", path.c_str(), 1), 0);
  LogCapture capture;
  auto groups = testing::make_inproc_groups(3, named("report-cost"));
  std::vector<std::shared_ptr<Group>> subs(3);
  testing::run_ranks(3, [&](int rank) {  // keys reversed: world rank 2 is the subgroup's 0
    subs[static_cast<size_t>(rank)] = groups[static_cast<size_t>(rank)]->split(0, -rank);
  });
  unsetenv("COHORT_COST_MODEL");
  const std::string expected = "cost model from calibration " + path + " (tcp 40 us + 1.5 GB/s";
  EXPECT_TRUE(has(line_of(capture, "report-cost"), expected)) << line_of(capture, "report-cost");
  EXPECT_TRUE(has(line_of(capture, "report-cost/split0/c0"), expected))
      << line_of(capture, "report-cost/split0/c0");
}

TEST(GroupReport, NothingAtTheDefaultLevel) {
  LogCapture capture(LogLevel::kWarn);
  auto groups = testing::make_inproc_groups(2, named("report-quiet"));
  EXPECT_TRUE(capture.info_lines("group '").empty());
}

// The knob itself, in a process of its own (the level is read once per process), spelled as
// NCCL_DEBUG=INFO is: two ranks print the group's line on stderr.
TEST(GroupReport, LogLevelInfoFromTheEnvironmentPrintsIt) {
  TcpStoreOptions options;
  options.is_server = true;
  options.timeout = 30s;
  TcpStore store(options);
  const std::string rank = std::string(COHORT_TEST_WORKER) + " " + std::to_string(store.port());
  // run_shell folds the stderr of the command it runs: here a shell that runs both ranks.
  const auto result = testing::run_shell(
      "/bin/sh -c '" + rank + " 0 2 allreduce_once & " + rank + " 1 2 allreduce_once; wait'",
      {"COHORT_LOG_LEVEL=INFO"}, 60s);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(has(result.output, "] group 'world': 2 ranks on 1 node")) << result.output;
  EXPECT_TRUE(has(result.output, "backend: cohort's algorithms over tcp")) << result.output;
}

}  // namespace
}  // namespace cohort
