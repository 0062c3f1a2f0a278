// Failure semantics across real processes (issue: "Failure semantics"): a killed rank is named
// by every survivor within seconds; a rank that never joins is named by the timeout; the debug
// mode names mismatched calls; garbage thrown at a rank's listener or sent by a fake peer is
// refused with a clear error, never a crash or a hang.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "cohort/comm/tcp_store.h"
#include "net/socket.h"
#include "support/process.h"
#include "transport/tcp/tcp_frames.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

struct Job {
  std::shared_ptr<TcpStore> store;
  std::vector<ChildProcess> ranks;
};

std::shared_ptr<TcpStore> make_server() {
  TcpStoreOptions options;
  options.is_server = true;
  options.timeout = 30s;
  return std::make_shared<TcpStore>(options);
}

ChildProcess start_rank(const TcpStore& store, int rank, int size, const std::string& scenario,
                        const std::string& param = "", std::vector<std::string> env = {}) {
  return ChildProcess({COHORT_TEST_WORKER, std::to_string(store.port()), std::to_string(rank),
                       std::to_string(size), scenario, param},
                      env);
}

Job start_job(int size, const std::string& scenario, const std::string& param = "",
              const std::vector<std::string>& env = {}) {
  Job job{make_server(), {}};
  for (int r = 0; r < size; ++r)
    job.ranks.push_back(start_rank(*job.store, r, size, scenario, param, env));
  return job;
}

struct Result {
  std::string kind;
  int failed_rank = -1;
  double seconds = 0;
  std::string line;
};

Result result_of(ChildProcess& child, std::chrono::milliseconds timeout) {
  Result out;
  out.line = child.wait_for_line("RESULT ", timeout);
  if (out.line.empty()) return out;
  char kind[64] = {0};
  std::sscanf(out.line.c_str(), "RESULT %63s failed_rank=%d seconds=%lf", kind, &out.failed_rank,
              &out.seconds);
  out.kind = kind;
  return out;
}

void expect_ready(Job& job) {
  for (auto& r : job.ranks) ASSERT_EQ(r.wait_for_line("READY", 30s), "READY") << r.output();
}

// Every rank of an allreduce_loop job has finished its first allreduce: what the test does
// next happens mid-loop.
void expect_looping(Job& job) {
  for (auto& r : job.ranks) ASSERT_EQ(r.wait_for_line("LOOPING", 30s), "LOOPING") << r.output();
}

// What is left of `budget` since `start` (0 once it is spent): one deadline for several waits.
std::chrono::milliseconds left_of(std::chrono::steady_clock::time_point start,
                                  std::chrono::milliseconds budget) {
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return std::max(budget - spent, std::chrono::milliseconds(0));
}

TEST(Failure, KilledRankIsNamedByEverySurvivorWithinSeconds) {
  for (int size : {2, 3, 4}) {
    Job job = start_job(size, "allreduce_loop");
    expect_ready(job);
    expect_looping(job);
    const int victim = 1;
    const auto killed_at = std::chrono::steady_clock::now();
    job.ranks[victim].kill(SIGKILL);
    for (int r = 0; r < size; ++r) {
      if (r == victim) continue;
      // Within seconds: the deadline of this wait, far below the group's own timeout (the
      // default, minutes), so a result in time is one the dead socket caused.
      const Result result = result_of(job.ranks[r], left_of(killed_at, 15s));
      EXPECT_EQ(result.kind, "PeerError")
          << "size " << size << " rank " << r << ": " << result.line;
      EXPECT_EQ(result.failed_rank, victim)
          << "size " << size << " rank " << r << ": " << result.line;
      EXPECT_EQ(job.ranks[r].wait(10s), 0);
    }
  }
}

TEST(Failure, RankExitingWithoutClosingItsGroupIsNamed) {
  Job job = start_job(3, "exit_early", "2");
  expect_ready(job);
  for (int r : {0, 1}) {
    const Result result = result_of(job.ranks[r], 15s);
    EXPECT_EQ(result.kind, "PeerError") << result.line;
    EXPECT_EQ(result.failed_rank, 2) << result.line;
  }
  EXPECT_EQ(job.ranks[2].wait(10s), 3);
}

// A frozen rank stops either between collectives (then the others name it as never having
// joined the next one) or inside one (then every rank started it and a peer is stuck in it).
TEST(Failure, FrozenRankIsATimeoutThatPointsAtIt) {
  Job job = start_job(3, "allreduce_loop", "", {"COHORT_TIMEOUT_S=2"});
  expect_ready(job);
  expect_looping(job);
  const auto frozen_at = std::chrono::steady_clock::now();
  job.ranks[1].kill(SIGSTOP);  // alive, connections open, but silent: only a deadline helps
  for (int r : {0, 2}) {
    // A deadline of 15 s for a 2 s timeout: a rank that waited far past it fails here.
    const Result result = result_of(job.ranks[r], left_of(frozen_at, 15s));
    EXPECT_EQ(result.kind, "TimeoutError") << result.line;
    const bool names_rank1 = result.line.find("never joined it: 1 (") != std::string::npos;
    const bool says_stuck =
        result.line.find("a peer is stuck or slow inside it") != std::string::npos;
    EXPECT_TRUE(names_rank1 || says_stuck) << result.line;
    EXPECT_NE(result.line.find("timed out after 2000 ms"), std::string::npos) << result.line;
    EXPECT_EQ(job.ranks[r].wait(10s), 0) << "rank " << r << " hung or crashed after the timeout";
  }
  job.ranks[1].kill(SIGKILL);
}

TEST(Failure, TimeoutNamesTheRankThatNeverJoined) {
  Job job = start_job(3, "skip_rank", "2", {"COHORT_TIMEOUT_S=2"});
  expect_ready(job);
  for (int r : {0, 1}) {
    const Result result = result_of(job.ranks[r], 20s);
    EXPECT_EQ(result.kind, "TimeoutError") << result.line;
    EXPECT_NE(result.line.find("never joined it: 2"), std::string::npos) << result.line;
    EXPECT_NE(result.line.find("allreduce #1"), std::string::npos) << result.line;
  }
}

TEST(Failure, DebugModeNamesTheRankWithAnotherCount) {
  Job job = start_job(3, "count_mismatch", "1", {"COHORT_DEBUG=detail", "COHORT_TIMEOUT_S=10"});
  expect_ready(job);
  for (int r = 0; r < 3; ++r) {
    const Result result = result_of(job.ranks[r], 20s);
    EXPECT_EQ(result.kind, "InvalidArgument") << result.line;
    EXPECT_NE(result.line.find("ranks 1 called allreduce(count=101"), std::string::npos)
        << result.line;
    EXPECT_NE(result.line.find("ranks 0, 2 called allreduce(count=100"), std::string::npos)
        << result.line;
  }
}

// The listener of rank 0 while it waits for rank 1 to connect.
net::Endpoint rank0_endpoint(TcpStore& store) {
  return net::Endpoint::parse(store.get_string("g/world/tcp/addr/0", 20s));
}

TEST(Failure, GarbageAtARanksListenerIsRefusedAndTheGroupStillForms) {
  auto store = make_server();
  std::vector<ChildProcess> ranks;
  ranks.push_back(start_rank(*store, 0, 2, "allreduce_once"));
  const auto endpoint = rank0_endpoint(*store);
  std::mt19937 random(42);
  const auto deadline = [] { return Deadline::after(2s); };
  {  // random bytes
    auto s = net::Socket::connect(endpoint.host, endpoint.port, deadline());
    std::vector<uint8_t> junk(1000);
    for (auto& b : junk) b = static_cast<uint8_t>(random());
    s.write_all(junk.data(), junk.size(), deadline());
  }
  {  // a truncated hello, then silence
    auto s = net::Socket::connect(endpoint.host, endpoint.port, deadline());
    tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, 0, 2, 1, {}};
    s.write_all(&hello, 10, deadline());
  }
  {  // a well-formed hello with the wrong secret
    auto s = net::Socket::connect(endpoint.host, endpoint.port, deadline());
    tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, 0, 2, 1, {}};
    s.write_all(&hello, sizeof hello, deadline());
    uint8_t ack = 0;
    EXPECT_THROW(s.read_all(&ack, 1, deadline()), net::NetError);  // refused: closed
  }
  ranks.push_back(start_rank(*store, 1, 2, "allreduce_once"));
  for (auto& r : ranks) {
    const Result result = result_of(r, 30s);
    EXPECT_EQ(result.kind, "ok") << result.line << "\n" << r.output();
  }
}

// A fake rank 1 that knows the secret completes the handshake, then sends `frame`.
std::string fake_peer_sends(const tcp::FrameHeader& frame) {
  auto store = make_server();
  // Over TCP only: the fake peer says it runs on a host of its own and has no shared memory
  // to set up (group_topology.cc reads these keys).
  ChildProcess rank0 = start_rank(*store, 0, 2, "allreduce_once", "", {"COHORT_SHM=0"});
  store->set("g/world/host/1/node", std::string("fake-host"));
  store->set("g/world/host/1/identity", std::string("fake-host"));
  store->set("g/world/host/1/pid", std::string("0"));  // unknown: not on rank 0's host
  store->set("g/world/shm-ready/1", std::string("1"));
  const auto endpoint = rank0_endpoint(*store);
  const Bytes secret = store->get("g/world/tcp/secret", 20s);
  auto s = net::Socket::connect(endpoint.host, endpoint.port, Deadline::after(5s));
  tcp::Hello hello{tcp::kHelloMagic, tcp::kProtocolVersion, 0, 2, 1, {}};
  std::copy(secret.begin(), secret.end(), hello.secret);
  s.write_all(&hello, sizeof hello, Deadline::after(5s));
  uint8_t ack = 0;
  s.read_all(&ack, 1, Deadline::after(5s));
  EXPECT_EQ(ack, 1);
  s.write_all(&frame, sizeof frame, Deadline::after(5s));
  const Result result = result_of(rank0, 20s);
  EXPECT_EQ(rank0.wait(10s), 0) << "rank 0 crashed or hung";
  EXPECT_EQ(result.kind, "PeerError") << result.line;
  EXPECT_EQ(result.failed_rank, 1) << result.line;
  return result.line;
}

TEST(Failure, MalformedFrameFromAPeerIsAClearError) {
  tcp::FrameHeader bad_magic{0xdeadbeef, tcp::kData, {0, 0, 0}, 0, 0, 16, {}};
  EXPECT_NE(fake_peer_sends(bad_magic).find("broke the protocol"), std::string::npos);
  tcp::FrameHeader bad_type{tcp::kFrameMagic, 77, {0, 0, 0}, 0, 0, 16, {}};
  EXPECT_NE(fake_peer_sends(bad_type).find("unknown frame type"), std::string::npos);
}

TEST(Failure, OversizedFrameFromAPeerIsRejectedWithoutAllocating) {
  tcp::FrameHeader huge{tcp::kFrameMagic, tcp::kData, {0, 0, 0}, 0, 0, 1ULL << 50, {}};
  EXPECT_NE(fake_peer_sends(huge).find("more than the limit"), std::string::npos);
}

}  // namespace
}  // namespace cohort
