// Device buffers staged through host memory (Note [Staged device buffers]): every collective
// and send/recv of a staged group gives the same results on "device" buffers as on host ones,
// chunked (allreduce, broadcast, reduce) or whole, at several world sizes and chunk sizes;
// only the ranks whose data a call reads copy to the host and only those it writes copy back;
// a buffer on another device is refused; a split keeps staging. No GPU is needed: the device
// is a stand-in whose "device memory" is host memory and whose copies are deferred until
// their wait, so a backend that read the staging area before waiting would see poison.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/device_staging.h"
#include "cohort/core/error.h"
#include "group/group_access.h"
#include "group/group_impl.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::fail_if;
using testing::run_ranks;

constexpr int kDevice = 0;
constexpr uint8_t kPoison = 0xA5;  // what an area holds before a copy lands in it

struct CopyCounts {
  size_t to_host = 0;
  size_t to_device = 0;
};

struct PendingCopy {
  void* to;
  const void* from;
  size_t bytes;
};

// Copies land only when waited for, as asynchronous device copies may.
class DeferredCopies final : public DeviceCopies {
 public:
  explicit DeferredCopies(CopyCounts& counts) : counts_(counts) {}
  void to_host(void* host, const void* device, size_t bytes) override {
    to_host_.push_back({host, device, bytes});
    ++counts_.to_host;
  }
  void wait_to_host(size_t n, Deadline) override {
    ASSERT_LE(n, to_host_.size());
    for (; landed_ < n; ++landed_) land(to_host_[landed_]);
  }
  void to_device(void* device, const void* host, size_t bytes) override {
    // The host's bytes as they are now: the area may be reused once the call is done.
    to_device_.push_back({device, host, bytes});
    ++counts_.to_device;
  }
  void wait_to_device(Deadline) override {
    for (const PendingCopy& copy : to_device_) land(copy);
    to_device_.clear();
  }

 private:
  static void land(const PendingCopy& copy) {
    if (copy.bytes > 0) std::memcpy(copy.to, copy.from, copy.bytes);
  }

  CopyCounts& counts_;
  std::vector<PendingCopy> to_host_;
  size_t landed_ = 0;
  std::vector<PendingCopy> to_device_;
};

class HostStandInStaging final : public DeviceStaging {
 public:
  explicit HostStandInStaging(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}
  void check_device(int device, const char* what) const override {
    if (device != kDevice) throw InvalidArgument(std::string(what) + ": not the staged device");
  }
  size_t chunk_bytes() const override { return chunk_bytes_; }
  uint8_t* host_area(size_t bytes) override {
    area_.assign(std::max<size_t>(bytes, 1), kPoison);  // every call starts from poison
    return area_.data();
  }
  std::shared_ptr<DeviceStaging> for_subgroup() const override {
    return std::make_shared<HostStandInStaging>(chunk_bytes_);
  }
  std::unique_ptr<DeviceCopies> begin(int device, void*) override {
    EXPECT_EQ(device, kDevice);
    return std::make_unique<DeferredCopies>(counts);
  }

  CopyCounts counts;

 private:
  size_t chunk_bytes_;
  std::vector<uint8_t> area_;
};

struct StagedRanks {
  std::vector<std::shared_ptr<Group>> groups;
  std::vector<HostStandInStaging*> staging;
};

StagedRanks make_staged_groups(int world, size_t chunk_bytes) {
  StagedRanks ranks;
  ranks.groups = testing::make_inproc_groups(world, testing::quick_options());
  for (auto& group : ranks.groups) {
    auto staging = std::make_shared<HostStandInStaging>(chunk_bytes);
    ranks.staging.push_back(staging.get());
    impl_of(*group).attach_staging(staging);
  }
  return ranks;
}

// "Device" memory of `count` elements of dtype.
struct DeviceArray {
  DeviceArray(size_t count, DType dtype)
      : bytes(count * dtype_size(dtype) + 1), n(count), type(dtype) {}
  Buffer buffer() { return Buffer{bytes.data(), n, type, kDevice}; }
  std::vector<uint8_t> bytes;
  size_t n;
  DType type;
};

// Chunk sizes: one element of float32 per chunk, a chunk that does not divide the counts, and
// one chunk for everything.
const size_t kChunkBytes[] = {4, 28, size_t{1} << 20};
const size_t kCounts[] = {0, 1, 5, 1001};

class StagedDeviceBuffers : public ::testing::TestWithParam<int> {};

TEST_P(StagedDeviceBuffers, AllreduceInPlaceAndOutOfPlaceMatchesTheReduction) {
  const int world = GetParam();
  for (size_t chunk : kChunkBytes) {
    auto ranks = make_staged_groups(world, chunk);
    run_ranks(world, [&](int rank) {
      Group& group = *ranks.groups[rank];
      for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          if (op == ReduceOp::kAvg && dtype == DType::kInt32) continue;
          for (size_t count : kCounts) {
            DeviceArray data(count, dtype);
            testing::fill_sweep(data.bytes.data(), count, dtype, op, rank);
            CollectiveOptions opts;
            opts.op = op;
            group.allreduce(data.buffer(), opts);
            fail_if(group, testing::check_sweep(data.bytes.data(), count, dtype, op, world),
                    "in place, chunk ", chunk, " ", dtype_name(dtype), " count ", count);
            DeviceArray in(count, dtype), out(count, dtype);
            testing::fill_sweep(in.bytes.data(), count, dtype, op, rank);
            group.allreduce(ConstBuffer(in.buffer()), out.buffer(), opts);
            fail_if(group, testing::check_sweep(out.bytes.data(), count, dtype, op, world),
                    "out of place, chunk ", chunk, " ", dtype_name(dtype), " count ", count);
          }
        }
      }
    });
  }
}

TEST_P(StagedDeviceBuffers, BroadcastAndReduceCopyOnlyWhereTheyReadAndWrite) {
  const int world = GetParam();
  const int root = world - 1;
  constexpr size_t kCount = 37;
  auto ranks = make_staged_groups(world, 12);  // 3 float32 per chunk: 13 chunks
  run_ranks(world, [&](int rank) {
    Group& group = *ranks.groups[rank];
    const CopyCounts& counts = ranks.staging[rank]->counts;
    CollectiveOptions opts;
    opts.root = root;
    DeviceArray data(kCount, DType::kFloat32);
    testing::fill_movement(data.bytes.data(), kCount, DType::kFloat32, rank);
    group.broadcast(data.buffer(), opts);
    fail_if(group,
            testing::check_movement(
                data.bytes.data(), kCount, DType::kFloat32, [&](size_t) { return root; },
                [](size_t i) { return i; }),
            "broadcast");
    const bool is_root = rank == root;
    fail_if(group, (counts.to_host > 0) == is_root ? "" : "to-host copies on the wrong ranks",
            "broadcast: ", counts.to_host, " copies to the host");
    fail_if(group, (counts.to_device > 0) != is_root ? "" : "to-device copies on the wrong ranks",
            "broadcast: ", counts.to_device, " copies to the device");

    const CopyCounts before = counts;
    opts.op = ReduceOp::kSum;
    testing::fill_sweep(data.bytes.data(), kCount, DType::kFloat32, opts.op, rank);
    group.reduce(data.buffer(), opts);
    if (is_root) {
      fail_if(group,
              testing::check_sweep(data.bytes.data(), kCount, DType::kFloat32, opts.op, world),
              "reduce at the root");
    }
    const bool copied_back = counts.to_device > before.to_device;
    fail_if(group, copied_back == is_root ? "" : "to-device copies on the wrong ranks", "reduce");
  });
}

TEST_P(StagedDeviceBuffers, BlockedCollectivesMoveEveryRanksBlocks) {
  const int world = GetParam();
  const auto n = static_cast<size_t>(world);
  const int root = world / 2;
  constexpr size_t kBlock = 9;
  constexpr DType kType = DType::kFloat32;
  auto ranks = make_staged_groups(world, 8);
  run_ranks(world, [&](int rank) {
    Group& group = *ranks.groups[rank];
    CollectiveOptions opts;
    opts.root = root;
    const auto by_block = [](size_t i) { return static_cast<int>(i / kBlock); };
    const auto in_block = [](size_t i) { return i % kBlock; };

    DeviceArray mine(kBlock, kType), all(kBlock * n, kType);
    testing::fill_movement(mine.bytes.data(), kBlock, kType, rank);
    group.allgather(ConstBuffer(mine.buffer()), all.buffer());
    fail_if(group, testing::check_movement(all.bytes.data(), kBlock * n, kType, by_block, in_block),
            "allgather");

    DeviceArray gathered(kBlock * n, kType);
    group.gather(ConstBuffer(mine.buffer()), gathered.buffer(), opts);
    if (rank == root) {
      fail_if(group,
              testing::check_movement(gathered.bytes.data(), kBlock * n, kType, by_block, in_block),
              "gather");
    }

    DeviceArray to_scatter(kBlock * n, kType), part(kBlock, kType);
    testing::fill_movement(to_scatter.bytes.data(), kBlock * n, kType, rank);
    group.scatter(ConstBuffer(to_scatter.buffer()), part.buffer(), opts);
    fail_if(group,
            testing::check_movement(
                part.bytes.data(), kBlock, kType, [&](size_t) { return root; },
                [&](size_t i) { return rank * kBlock + i; }),
            "scatter");

    DeviceArray sent(kBlock * n, kType), received(kBlock * n, kType);
    testing::fill_movement(sent.bytes.data(), kBlock * n, kType, rank);
    group.all_to_all(ConstBuffer(sent.buffer()), received.buffer());
    fail_if(group,
            testing::check_movement(received.bytes.data(), kBlock * n, kType, by_block,
                                    [&](size_t i) { return rank * kBlock + i % kBlock; }),
            "all_to_all");

    DeviceArray contributions(kBlock * n, kType), reduced(kBlock, kType);
    testing::fill_sweep(contributions.bytes.data(), kBlock * n, kType, ReduceOp::kSum, rank);
    group.reduce_scatter(ConstBuffer(contributions.buffer()), reduced.buffer());
    fail_if(group,
            testing::check_sweep(reduced.bytes.data(), kBlock, kType, ReduceOp::kSum, world,
                                 rank * kBlock),
            "reduce_scatter");
  });
}

INSTANTIATE_TEST_SUITE_P(World, StagedDeviceBuffers, ::testing::Values(1, 2, 3, 5),
                         [](const auto& world) { return "world" + std::to_string(world.param); });

TEST(StagedDeviceBuffers, SendAndRecvCarryDeviceBuffers) {
  auto ranks = make_staged_groups(2, 8);
  run_ranks(2, [&](int rank) {
    Group& group = *ranks.groups[rank];
    constexpr size_t kCount = 11;
    DeviceArray data(kCount, DType::kFloat64);
    if (rank == 0) {
      testing::fill_movement(data.bytes.data(), kCount, DType::kFloat64, 0);
      group.send(ConstBuffer(data.buffer()), 1);
    } else {
      group.recv(data.buffer(), 0);
      fail_if(group,
              testing::check_movement(
                  data.bytes.data(), kCount, DType::kFloat64, [](size_t) { return 0; },
                  [](size_t i) { return i; }),
              "recv");
    }
  });
}

TEST(StagedDeviceBuffers, ABufferOnAnotherDeviceIsRefusedBeforeAnythingIsQueued) {
  auto ranks = make_staged_groups(2, 8);
  run_ranks(2, [&](int rank) {
    Group& group = *ranks.groups[rank];
    std::vector<float> elsewhere(4);
    EXPECT_THROW(group.allreduce(Buffer{elsewhere.data(), 4, DType::kFloat32, kDevice + 1}),
                 InvalidArgument);
    EXPECT_TRUE(group.takes_device_buffers());
    DeviceArray data(3, DType::kFloat32);
    testing::fill_sweep(data.bytes.data(), 3, DType::kFloat32, ReduceOp::kSum, rank);
    group.allreduce(data.buffer());  // still in step: nothing was queued
    fail_if(group, testing::check_sweep(data.bytes.data(), 3, DType::kFloat32, ReduceOp::kSum, 2),
            "after the refusal");
  });
}

TEST(StagedDeviceBuffers, ASplitKeepsStaging) {
  auto ranks = make_staged_groups(4, 8);
  run_ranks(4, [&](int rank) {
    auto half = ranks.groups[rank]->split(rank % 2, rank);
    DeviceArray data(6, DType::kFloat32);
    testing::fill_sweep(data.bytes.data(), 6, DType::kFloat32, ReduceOp::kSum, half->rank());
    half->allreduce(data.buffer());
    fail_if(*half, testing::check_sweep(data.bytes.data(), 6, DType::kFloat32, ReduceOp::kSum, 2),
            "allreduce on the split");
  });
}

}  // namespace
}  // namespace cohort
