// The TCP transport itself, with ranks as threads of this process: every connection of every
// group runs on the process's two event loops (one reads, one writes), so the threads of a
// process do not grow with peers or groups.
#include "cohort/comm/tcp_transport.h"

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/prefix_store.h"
#include "support/sync.h"
#include "support/test_support.h"

namespace cohort {
namespace {

// Waits until this process runs at most `most` threads: a joined thread leaves /proc a moment
// after join() returns. Returns the last count.
int wait_for_threads_at_most(int most) {
  const Deadline deadline = Deadline::after(std::chrono::seconds(5));
  int count = testing::thread_count();
  while (count > most && !deadline.expired()) {
    std::this_thread::yield();
    count = testing::thread_count();
  }
  return count;
}

// A full mesh of `world` ranks; the rank threads have ended when it returns.
std::vector<std::unique_ptr<Transport>> make_mesh(int world, const std::string& name) {
  auto store = std::make_shared<PrefixStore>(name, std::make_shared<MemoryStore>());
  std::vector<std::unique_ptr<Transport>> mesh(world);
  TcpTransportOptions options;
  options.host = "127.0.0.1";
  options.bind_host = "127.0.0.1";
  options.timeout = std::chrono::seconds(30);
  testing::run_ranks(
      world, [&](int rank) { mesh[rank] = connect_tcp_transport(store, rank, world, options); });
  return mesh;
}

// Sends one message around the ring of `mesh` and checks it arrived.
void pass_around(std::vector<std::unique_ptr<Transport>>& mesh) {
  const int world = static_cast<int>(mesh.size());
  testing::run_ranks(world, [&](int rank) {
    const Deadline deadline = Deadline::after(std::chrono::seconds(30));
    int out = rank;
    int in = -1;
    const Tag tag{1, 0, {}};
    auto send = mesh[rank]->isend((rank + 1) % world, tag, &out, sizeof out, deadline);
    mesh[rank]->irecv((rank + world - 1) % world, tag, &in, sizeof in, deadline)->wait();
    send->wait();
    EXPECT_EQ(in, (rank + world - 1) % world);
  });
}

TEST(TcpTransport, ConnectionsOfEveryGroupShareTheTwoLoopThreads) {
  // A first mesh, made and dropped, starts what a runtime starts once and keeps (TSan's own
  // thread), so that it is not counted against the loops; its loops end with it.
  const int at_start = testing::thread_count();
  make_mesh(2, "warm-up");
  const int before = wait_for_threads_at_most(at_start);
  ASSERT_GT(before, 0);
  auto first = make_mesh(4, "first");
  auto second = make_mesh(3, "second");
  pass_around(first);
  pass_around(second);
  // 4 x 3 + 3 x 2 = 18 connections; they used to run two threads each.
  EXPECT_LE(wait_for_threads_at_most(before + 2), before + 2) << "threads beyond the two loops";
  first.clear();
  second.clear();
  EXPECT_LE(wait_for_threads_at_most(before), before) << "an event loop outlived its transports";
}

}  // namespace
}  // namespace cohort
