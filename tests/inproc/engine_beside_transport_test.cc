// A group's engine sits beside its transport (Note [Backends]). An engine of device memory
// only, as NCCL's is, gets the calls on device buffers and the barriers; the group's host
// buffers run on cohort's algorithms over its transport; a split gives each subgroup the
// engine's for_subgroup; an abort reaches the engine. The engine here is a stand-in that
// records what it is given (no GPU needed): the "device" buffers are host memory that it
// fills with a marker, so a test can tell which side ran a call.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "backends/collective_engine.h"
#include "cohort/core/error.h"
#include "group/group_access.h"
#include "group/group_impl.h"
#include "support/test_support.h"

namespace cohort {
namespace {

constexpr int kFakeDevice = 0;
constexpr float kEngineMarker = -7.0F;

class DeviceOnlyEngine final : public CollectiveEngine {
 public:
  DeviceOnlyEngine(int rank, int size) : rank_(rank), size_(size) {}

  const char* engine_name() const override { return "fake-device"; }
  Backend kind() const override { return Backend::kNccl; }  // stands for NCCL
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool handles_host_memory() const override { return false; }
  bool handles_device_memory() const override { return true; }
  void check_device(int device, const char* what) const override {
    if (device != kFakeDevice) throw InvalidArgument(std::string(what) + ": wrong device");
  }
  bool supports(CollectiveKind, DType, ReduceOp, size_t) const override { return true; }

  void allreduce(const void*, void* data, size_t count, DType, ReduceOp op,
                 const EngineCall& call) override {
    record(CollectiveKind::kAllreduce, call);
    last_op = op;
    auto* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] = kEngineMarker;
  }
  void broadcast(void*, size_t, DType, int, const EngineCall& c) override {
    record(CollectiveKind::kBroadcast, c);
  }
  void reduce(void*, size_t, DType, ReduceOp, int, const EngineCall& c) override {
    record(CollectiveKind::kReduce, c);
  }
  void allgather(const void*, void*, size_t, DType, const EngineCall& c) override {
    record(CollectiveKind::kAllgather, c);
  }
  void reduce_scatter(const void*, void*, size_t, DType, ReduceOp, const EngineCall& c) override {
    record(CollectiveKind::kReduceScatter, c);
  }
  void gather(const void*, void*, size_t, DType, int, const EngineCall& c) override {
    record(CollectiveKind::kGather, c);
  }
  void scatter(const void*, void*, size_t, DType, int, const EngineCall& c) override {
    record(CollectiveKind::kScatter, c);
  }
  void all_to_all(const void*, void*, size_t, DType, const EngineCall& c) override {
    record(CollectiveKind::kAllToAll, c);
  }
  void barrier(const EngineCall& c) override { record(CollectiveKind::kBarrier, c); }
  void send(const void*, size_t, DType, int, const EngineCall& c) override {
    record(CollectiveKind::kSend, c);
  }
  void recv(void* data, size_t count, DType, int, const EngineCall& c) override {
    record(CollectiveKind::kRecv, c);
    auto* values = static_cast<float*>(data);
    for (size_t i = 0; i < count; ++i) values[i] = kEngineMarker;
  }
  void abort(std::exception_ptr) noexcept override { aborted = true; }
  std::shared_ptr<CollectiveEngine> for_subgroup(HostCollectives& subgroup, Deadline) override {
    auto child = std::make_shared<DeviceOnlyEngine>(subgroup.rank(), subgroup.size());
    children.push_back(child);
    return child;
  }

  std::vector<CollectiveKind> calls() {
    std::lock_guard<std::mutex> lock(mutex_);
    return calls_;
  }

  ReduceOp last_op = ReduceOp::kSum;
  std::atomic<bool> aborted{false};
  std::vector<std::shared_ptr<DeviceOnlyEngine>> children;

 private:
  void record(CollectiveKind kind, const EngineCall& call) {
    std::lock_guard<std::mutex> lock(mutex_);
    calls_.push_back(kind);
    last_device_ = call.device;
  }

  int rank_;
  int size_;
  std::mutex mutex_;
  std::vector<CollectiveKind> calls_;
  int last_device_ = kHostMemory;
};

// `world` in-process groups, each with a DeviceOnlyEngine beside its transport.
struct EngineGroups {
  std::vector<std::shared_ptr<Group>> groups;
  std::vector<std::shared_ptr<DeviceOnlyEngine>> engines;
};

EngineGroups make_engine_groups(int world) {
  EngineGroups made;
  made.groups = testing::make_inproc_groups(world, testing::quick_options());
  EXPECT_EQ(made.groups[0]->backend(), Backend::kNative);  // cohort's algorithms alone
  for (int r = 0; r < world; ++r) {
    made.engines.push_back(std::make_shared<DeviceOnlyEngine>(r, world));
    impl_of(*made.groups[r]).attach_engine(made.engines.back());
  }
  return made;
}

TEST(EngineBesideTransport, DeviceBuffersGoToTheEngineHostBuffersToCohortsAlgorithms) {
  constexpr int kWorld = 3;
  EngineGroups made = make_engine_groups(kWorld);
  testing::run_ranks(kWorld, [&](int rank) {
    Group& group = *made.groups[rank];
    std::vector<float> device(4, 1.0F);
    CollectiveOptions avg;
    avg.op = ReduceOp::kAvg;
    group.allreduce(Buffer{device.data(), device.size(), DType::kFloat32, kFakeDevice}, avg);
    EXPECT_EQ(device, std::vector<float>(4, kEngineMarker));
    std::vector<float> host(4, static_cast<float>(rank + 1));
    group.allreduce(make_buffer(host));
    EXPECT_EQ(host, std::vector<float>(4, 6.0F));  // 1 + 2 + 3, by cohort's algorithms
    group.barrier();
  });
  for (const auto& engine : made.engines) {
    EXPECT_EQ(engine->calls(),
              (std::vector<CollectiveKind>{CollectiveKind::kAllreduce, CollectiveKind::kBarrier}));
    EXPECT_EQ(engine->last_op, ReduceOp::kAvg);  // the engine averages device memory itself
  }
  EXPECT_TRUE(made.groups[0]->takes_device_buffers());
  // The group reports its engine's place in the one Backend list.
  EXPECT_EQ(made.groups[0]->backend(), Backend::kNccl);
}

TEST(EngineBesideTransport, SendAndRecvOfHostBuffersUseTheTransport) {
  EngineGroups made = make_engine_groups(2);
  testing::run_ranks(2, [&](int rank) {
    Group& group = *made.groups[rank];
    std::vector<float> host{static_cast<float>(rank) + 10.0F};
    std::vector<float> device{0.0F};
    if (rank == 0) {
      group.send(make_buffer(host), 1);
      group.send(ConstBuffer{device.data(), 1, DType::kFloat32, kFakeDevice}, 1);
    } else {
      group.recv(make_buffer(host), 0);
      EXPECT_EQ(host[0], 10.0F);
      group.recv(Buffer{device.data(), 1, DType::kFloat32, kFakeDevice}, 0);
      EXPECT_EQ(device[0], kEngineMarker);
    }
  });
  EXPECT_EQ(made.engines[0]->calls(), std::vector<CollectiveKind>{CollectiveKind::kSend});
  EXPECT_EQ(made.engines[1]->calls(), std::vector<CollectiveKind>{CollectiveKind::kRecv});
}

TEST(EngineBesideTransport, ABufferOnAnotherDeviceIsRefusedOnTheCallersThread) {
  EngineGroups made = make_engine_groups(1);
  std::vector<float> data(2);
  EXPECT_THROW(made.groups[0]->allreduce(Buffer{data.data(), 2, DType::kFloat32, 3}),
               InvalidArgument);
  EXPECT_TRUE(made.engines[0]->calls().empty());
}

TEST(EngineBesideTransport, SplitGivesEachSubgroupItsEngineFromTheMembersOnly) {
  constexpr int kWorld = 4;
  EngineGroups made = make_engine_groups(kWorld);
  std::vector<std::shared_ptr<Group>> subgroups(kWorld);
  testing::run_ranks(kWorld, [&](int rank) {
    // Ranks 0 and 2 form a subgroup; 1 and 3 join none.
    subgroups[rank] = made.groups[rank]->split(rank % 2 == 0 ? 0 : -1, rank);
    if (!subgroups[rank]) return;
    std::vector<float> device(1);
    subgroups[rank]->allreduce(Buffer{device.data(), 1, DType::kFloat32, kFakeDevice});
    std::vector<float> host{static_cast<float>(rank)};
    subgroups[rank]->allreduce(make_buffer(host));
    EXPECT_EQ(host[0], 2.0F);
  });
  for (int r = 0; r < kWorld; ++r) {
    const bool member = r % 2 == 0;
    ASSERT_EQ(made.engines[r]->children.size(), member ? 1U : 0U) << "rank " << r;
    if (!member) continue;
    EXPECT_EQ(made.engines[r]->children[0]->size(), 2);
    EXPECT_EQ(made.engines[r]->children[0]->calls(),
              std::vector<CollectiveKind>{CollectiveKind::kAllreduce});
    EXPECT_TRUE(made.engines[r]->calls().empty());  // the parent's engine ran nothing
  }
}

TEST(EngineBesideTransport, AbortReachesTheEngine) {
  EngineGroups made = make_engine_groups(1);
  made.groups[0]->abort("stop");
  EXPECT_TRUE(made.engines[0]->aborted);
}

}  // namespace
}  // namespace cohort

namespace cohort {
namespace {

// Only cohort's backends build a group without a store (MPI brings its own bookkeeping): the
// public constructor refuses one, naming what is missing.
TEST(GroupConstruction, ATransportWithoutAStoreIsRefused) {
  auto fabric = std::make_shared<InprocFabric>(1);
  try {
    Group group(std::make_unique<InprocTransport>(fabric, 0), nullptr, GroupOptions{});
    FAIL() << "a group without a store was made";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("needs a store"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
