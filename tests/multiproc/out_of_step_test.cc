// Collectives out of step across ranks (Note [Call stamps] in src/comm/transport/call_stamp.h):
// rank 1 makes another call than the others, and every rank throws MismatchError naming both calls,
// over shared memory (the default on one host) and over TCP, without COHORT_DEBUG.
#include <gtest/gtest.h>

#include <chrono>

#include "cohort/comm/tcp_store.h"
#include "support/process.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

struct Case {
  std::string how;          // the worker's out_of_step case
  std::string odd_call;     // how rank 1's call starts in the message
  std::string odd_part;     // and what sets it apart
  std::string others_part;  // what the other ranks' call has instead
};

// Counts as the worker makes them: 1024 x size elements, twice that on rank 1 for "count".
Case count_case(int size) {
  const std::string count = std::to_string(1024 * size);
  const std::string twice = std::to_string(2048 * size);
  return {"count", "allreduce(count=" + twice, "count=" + twice, "count=" + count + ","};
}
Case kind_case(int) {
  return {"kind", "allgather(count=1024,", "allgather", "allreduce("};
}
Case root_case(int) {
  return {"root", "broadcast(", "root=1)", "root=0)"};
}

void expect_every_rank_names_the_mismatch(int size, const Case& c, const std::string& transport) {
  SCOPED_TRACE(transport + ", " + std::to_string(size) + " ranks, " + c.how);
  TcpStoreOptions store_options;
  store_options.is_server = true;
  store_options.timeout = 30s;
  TcpStore store(store_options);
  // A mismatch is named at once; the deadline only bounds a test that would otherwise hang.
  std::vector<std::string> env = {"COHORT_TIMEOUT_S=30"};
  if (transport == "tcp") env.push_back("COHORT_SHM=0");
  std::vector<ChildProcess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.push_back(ChildProcess({COHORT_TEST_WORKER, std::to_string(store.port()),
                                  std::to_string(r), std::to_string(size), "out_of_step", c.how},
                                 env));
  }
  for (auto& rank : ranks) {
    const std::string line = rank.wait_for_line("RESULT ", 60s);
    ASSERT_NE(line, "") << rank.output();
    EXPECT_EQ(line.rfind("RESULT MismatchError", 0), 0u) << line;
    EXPECT_NE(line.find("collectives out of step"), std::string::npos) << line;
    EXPECT_NE(line.find("rank 1 called " + c.odd_call), std::string::npos) << line;
    EXPECT_NE(line.find(c.odd_part), std::string::npos) << line;
    EXPECT_NE(line.find(c.others_part), std::string::npos) << line;
  }
}

TEST(OutOfStep, EveryRankNamesBothCallsOverSharedMemory) {
  for (int size : {2, 3}) {
    for (auto make : {count_case, kind_case, root_case}) {
      expect_every_rank_names_the_mismatch(size, make(size), "shm");
    }
  }
}

TEST(OutOfStep, EveryRankNamesBothCallsOverTcp) {
  for (int size : {2, 3}) {
    for (auto make : {count_case, kind_case, root_case}) {
      expect_every_rank_names_the_mismatch(size, make(size), "tcp");
    }
  }
}

}  // namespace
}  // namespace cohort
