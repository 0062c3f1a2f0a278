// Note [Stall reports] (src/comm/group/stall_report.h): a group's store hears nothing while
// its collectives keep finishing, and a timeout still names the rank that never joined.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "cohort/comm/group.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/comm/memory_store.h"
#include "support/test_support.h"

namespace cohort {
namespace {

// Counts what the groups ask of the store (the group's set-up included).
class CountingStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    ++ops;
    inner_.set(key, value);
  }
  Bytes get(const std::string& key, Milliseconds timeout) override {
    ++ops;
    return inner_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++ops;
    return inner_.add(key, delta);
  }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    ++ops;
    return inner_.compare_set(key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override {
    ++ops;
    inner_.wait(keys, timeout);
  }
  bool delete_key(const std::string& key) override {
    ++ops;
    return inner_.delete_key(key);
  }
  int64_t num_keys() override {
    ++ops;
    return inner_.num_keys();
  }

  std::atomic<int64_t> ops{0};

 private:
  MemoryStore inner_;
};

std::vector<std::unique_ptr<Group>> groups_over(const std::shared_ptr<Store>& store, int world,
                                                Milliseconds timeout) {
  auto fabric = std::make_shared<InprocFabric>(world);
  std::vector<std::unique_ptr<Group>> groups;
  for (int r = 0; r < world; ++r) {
    groups.push_back(std::make_unique<Group>(std::make_unique<InprocTransport>(fabric, r), store,
                                             testing::quick_options(timeout)));
  }
  return groups;
}

// Steady collectives for several stall-report periods (200 ms at a 2 s timeout): no store
// operation at all. (Before: every rank wrote its progress every 100 ms.)
TEST(StallReport, SteadyCollectivesLeaveTheStoreQuiet) {
  const int world = 4;
  auto store = std::make_shared<CountingStore>();
  auto groups = groups_over(store, world, std::chrono::seconds(2));
  testing::run_ranks(world, [&](int rank) { groups[rank]->barrier(); });
  const int64_t after_setup = store->ops.load();
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  std::atomic<bool> more{true};
  testing::run_ranks(world, [&](int rank) {
    std::vector<float> data(256, 1.0f);
    for (;;) {
      // Rank 0 decides for everyone, so that every rank runs the same number of allreduces.
      int32_t go = rank == 0 && std::chrono::steady_clock::now() < until ? 1 : 0;
      groups[rank]->broadcast(make_buffer(&go, 1));
      if (!go) break;
      groups[rank]->allreduce(make_buffer(data));
    }
  });
  EXPECT_EQ(store->ops.load(), after_setup) << "the store was asked during steady collectives";
}

// Rank 2 never calls the allreduce that ranks 0, 1 and 3 wait in: their timeouts name it, and
// only it (the others report their stall through the store while they wait).
TEST(StallReport, ATimeoutNamesOnlyTheRankThatNeverJoined) {
  const int world = 4;
  auto store = std::make_shared<CountingStore>();
  auto groups = groups_over(store, world, std::chrono::seconds(1));
  std::vector<std::string> errors(world);
  testing::run_ranks(world, [&](int rank) {
    groups[rank]->barrier();
    if (rank == 2) return;
    std::vector<float> data(16, 1.0f);
    try {
      groups[rank]->allreduce(make_buffer(data));
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  bool named = false;
  for (int rank : {0, 1, 3}) {
    if (errors[rank].find("timed out") == std::string::npos) continue;  // relayed aborts differ
    named = true;
    EXPECT_NE(errors[rank].find("ranks that never joined it: 2 (in no collective of this group)"),
              std::string::npos)
        << errors[rank];
  }
  EXPECT_TRUE(named) << "no rank timed out: " << errors[0];
}

}  // namespace
}  // namespace cohort
