// Groups over the TCP transport with ranks as threads of this process (the store is a
// MemoryStore): the same collectives as the inproc sweeps, but through real sockets.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "cohort/comm/memory_store.h"
#include "net/socket.h"
#include "support/sync.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_tcp_groups;
using testing::run_ranks;

TEST(TcpGroup, AllreduceEveryAlgorithmAndSize) {
  for (int world : {2, 3, 4}) {
    auto groups = make_tcp_groups(world, testing::quick_options());
    run_ranks(world, [&](int rank) {
      for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kDirect, Algorithm::kAuto}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{(1 << 20) + 3}}) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i)
            data[i] = static_cast<float>(testing::sweep_value(ReduceOp::kSum, rank, i));
          CollectiveOptions opts;
          opts.algorithm = algorithm;
          groups[rank]->allreduce(make_buffer(data), opts);
          for (size_t i = 0; i < count; ++i) {
            const double want = testing::sweep_expected(ReduceOp::kSum, world, i);
            if (data[i] != want) {
              testing::fail_if(*groups[rank],
                               "element " + std::to_string(i) + " is " + std::to_string(data[i]) +
                                   ", want " + std::to_string(want),
                               algorithm_name(algorithm), " count ", count, " world ", world);
            }
          }
        }
      }
    });
  }
}

TEST(TcpGroup, TimeoutNamesTheRanksThatNeverJoined) {
  const int world = 3;
  auto groups = make_tcp_groups(world, testing::quick_options(std::chrono::milliseconds(1500)));
  std::vector<std::string> errors(world);
  run_ranks(world, [&](int rank) {
    std::vector<float> data(16, 1.0f);
    groups[rank]->allreduce(make_buffer(data));  // #0 everyone
    if (rank == 2) return;                       // rank 2 skips #1
    try {
      groups[rank]->allreduce(make_buffer(data));
    } catch (const TimeoutError& e) {
      errors[rank] = e.what();
    }
  });
  for (int rank : {0, 1}) {
    EXPECT_NE(errors[rank].find("allreduce #1"), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("never joined it: 2"), std::string::npos) << errors[rank];
  }
}

TEST(TcpGroup, DebugModeNamesCountMismatch) {
  const int world = 2;
  GroupOptions options = testing::quick_options(std::chrono::milliseconds(5000));
  options.debug_checks = true;
  auto groups = make_tcp_groups(world, options);
  std::vector<std::string> errors(world);
  run_ranks(world, [&](int rank) {
    std::vector<float> data(rank == 0 ? 100 : 99, 1.0f);
    try {
      groups[rank]->allreduce(make_buffer(data));
    } catch (const InvalidArgument& e) {
      errors[rank] = e.what();
    }
  });
  for (int rank : {0, 1}) {
    EXPECT_NE(errors[rank].find("ranks 0 called allreduce(count=100"), std::string::npos)
        << errors[rank];
    EXPECT_NE(errors[rank].find("ranks 1 called allreduce(count=99"), std::string::npos)
        << errors[rank];
  }
}

TEST(TcpGroup, BrokenGroupRefusesFurtherWork) {
  const int world = 2;
  auto groups = make_tcp_groups(world, testing::quick_options(std::chrono::milliseconds(1000)));
  testing::EventCount rank0_gave_up;
  run_ranks(world, [&](int rank) {
    std::vector<float> data(8, 1.0f);
    if (rank == 0) {
      EXPECT_THROW(groups[rank]->allreduce(make_buffer(data)), TimeoutError);
      rank0_gave_up.add();
    }
    // Rank 1 comes only after rank 0 gave up, however long that took on a loaded machine: a
    // fixed sleep let it arrive first under TSan and complete the round rank 0 had posted.
    if (!rank0_gave_up.wait_for(1, std::chrono::seconds(60))) {
      throw std::runtime_error("rank 0's allreduce never timed out");
    }
    // Both ranks: the group is broken now (rank 1 learns it from rank 0's abort).
    EXPECT_THROW(groups[rank]->allreduce(make_buffer(data)), TimeoutError);
    EXPECT_THROW(groups[rank]->barrier(), TimeoutError);
  });
}

bool has_ipv6_loopback() {
  try {
    net::Listener::bind("::1", 0);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

TEST(TcpGroup, WorksOverIPv6) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  const int world = 3;
  auto groups = make_tcp_groups(world, testing::quick_options(), "::1");
  run_ranks(world, [&](int rank) {
    std::vector<int64_t> data(1000, rank + 1);
    groups[rank]->allreduce(make_buffer(data));
    testing::fail_if(*groups[rank], data[999] == 6 ? "" : "wrong sum " + std::to_string(data[999]),
                     "ipv6 allreduce");
  });
}

TEST(TcpGroup, SplitBuildsWorkingSubgroups) {
  const int world = 4;
  auto groups = make_tcp_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    // Even and odd ranks; keys reverse the order inside each subgroup.
    auto sub = groups[rank]->split(rank % 2, -rank);
    std::vector<float> data(100000, static_cast<float>(rank));
    sub->allreduce(make_buffer(data));
    const float want = rank % 2 == 0 ? 0.0f + 2.0f : 1.0f + 3.0f;
    testing::fail_if(*groups[rank], data[99999] == want ? "" : "wrong subgroup sum", "split");
    testing::fail_if(*groups[rank], sub->rank() == (rank < 2 ? 1 : 0) ? "" : "wrong subgroup rank",
                     "split");
    // The parent group still works after the split.
    groups[rank]->barrier();
  });
}

TEST(TcpGroup, ManyAsyncCollectivesInFlight) {
  const int world = 3;
  auto groups = make_tcp_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    std::vector<std::vector<float>> buffers(8, std::vector<float>(300000, 1.0f));
    std::vector<std::shared_ptr<Work>> works;
    for (auto& b : buffers) works.push_back(groups[rank]->allreduce_async(make_buffer(b)));
    for (size_t i = works.size(); i-- > 0;) works[i]->wait();  // waited in reverse order
    for (auto& b : buffers) {
      testing::fail_if(*groups[rank], b.back() == 3.0f ? "" : "wrong async result", "async");
    }
  });
}

// ---------------------------------------------------------------- Note [Concurrent handshakes]

// A store that, before it publishes a rank's listener address (tcp/addr/<rank>), opens
// `silent` connections to that listener which never send a byte: they are first in its
// accept queue, ahead of every real rank.
class SilentConnectionsStore : public MemoryStore {
 public:
  using Store::set;
  explicit SilentConnectionsStore(int silent) : silent_(silent) {}

  void set(const std::string& key, const Bytes& value) override {
    if (key.find("tcp/addr/") != std::string::npos) {
      const auto endpoint = net::Endpoint::parse(to_string(value));
      std::lock_guard<std::mutex> lock(mutex_);
      for (int i = 0; i < silent_; ++i) {
        sockets_.push_back(net::Socket::connect(endpoint.host, endpoint.port,
                                                Deadline::after(std::chrono::seconds(5))));
      }
    }
    MemoryStore::set(key, value);
  }

 private:
  const int silent_;
  std::mutex mutex_;
  std::vector<net::Socket> sockets_;
};

// Three silent connections per listener, each allowed 5 s one after another, used to hold a
// group's creation for 15 s per rank. The group's deadline here is 12 s, so only handshakes
// served side by side let it finish (the silent connections stay open on our side throughout).
TEST(TcpGroup, SilentConnectionsToTheListenersDoNotHoldUpTheGroup) {
  const int world = 4;
  auto store = std::make_shared<SilentConnectionsStore>(3);
  GroupOptions options = testing::quick_options(std::chrono::seconds(12));
  options.host = "127.0.0.1";
  options.shared_memory = false;
  std::vector<std::shared_ptr<Group>> groups(world);
  run_ranks(world, [&](int rank) { groups[rank] = Group::create(store, rank, world, options); });
  run_ranks(world, [&](int rank) {
    std::vector<float> data(16, 1.0f);
    groups[rank]->allreduce(make_buffer(data));
    testing::fail_if(*groups[rank], data[0] == world ? "" : "wrong allreduce result", "rank ",
                     rank);
  });
}

}  // namespace
}  // namespace cohort
