// Registered memory (Group::allocate_registered, Note [Registered buffers] in
// transport/shm/shm_registry.h): every shared-memory collective in place on registered
// buffers, for every dtype, op and size; the hierarchical allreduce's phases inside a node;
// mismatched memory named on every rank; and a rank killed while the others read its memory.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"
#include "support/collective_checks.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;
using testing::Memory;

// Element counts: empty, fewer than the ranks, not divisible by them, across 16 KiB blocks and
// the staged path's 256 KiB rounds.
const size_t kCounts[] = {0, 1, 5, 4099, 65537, 300001};

// kCounts, without the largest at COHORT_TEST_SCALE=small (the sanitizer legs), where it alone
// takes minutes under TSan; 65537 elements still cross the staged rounds in every dtype but one
// byte wide ones.
std::vector<size_t> registered_counts() {
  std::vector<size_t> counts(std::begin(kCounts), std::end(kCounts));
  if (testing::small_scale()) counts.pop_back();
  return counts;
}

TEST(RegisteredMemory, IsSharedOnANodeAndZeroFilled) {
  auto groups = testing::make_tcp_groups(3, testing::quick_options());
  testing::run_ranks(3, [&](int rank) {
    auto memory = groups[static_cast<size_t>(rank)]->allocate_registered(10000);
    testing::fail_if(*groups[static_cast<size_t>(rank)], memory->shared() ? "" : "not shared",
                     "rank ", rank);
    size_t nonzero = 0;
    for (size_t i = 0; i < memory->bytes(); ++i) nonzero += memory->as<uint8_t>()[i] != 0;
    testing::fail_if(*groups[static_cast<size_t>(rank)],
                     nonzero ? std::to_string(nonzero) + " bytes not zero" : "", "rank ", rank);
  });
}

TEST(RegisteredMemory, AllreduceEveryDtypeOpAndSize) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t count : registered_counts()) {
        for (DType dtype : testing::all_dtypes()) {
          for (ReduceOp op : testing::all_ops()) {
            testing::fail_if(group,
                             testing::check_allreduce(group, count, dtype, op, Algorithm::kShm,
                                                      Memory::kRegistered),
                             "world ", world, " count ", count, " ", dtype_name(dtype), " ",
                             reduce_op_name(op));
          }
        }
      }
    });
  }
}

// A reduce-scatter's count is each rank's block, so its input is `world` times an allreduce's
// of the same count: 65537 elements a rank cross the staged path's 256 KiB rounds in every dtype
// wider than a byte (one-byte ones at 4 ranks), and the largest count, 34 s of the suite's time,
// is left to the allreduce sweep.
TEST(RegisteredMemory, ReduceScatterEveryDtypeOpAndSizeInAndOutOfPlace) {
  std::vector<size_t> counts(std::begin(kCounts), std::end(kCounts));
  counts.pop_back();
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t count : counts) {
        for (DType dtype : testing::all_dtypes()) {
          for (ReduceOp op : testing::all_ops()) {
            testing::fail_if(group,
                             testing::check_reduce_scatter(group, count, dtype, op, Algorithm::kShm,
                                                           Memory::kRegistered),
                             "world ", world, " count ", count, " ", dtype_name(dtype), " ",
                             reduce_op_name(op));
            testing::fail_if(group,
                             testing::check_reduce_scatter_in_place(
                                 group, count, dtype, op, Algorithm::kShm, Memory::kRegistered),
                             "in place, world ", world, " count ", count, " ", dtype_name(dtype),
                             " ", reduce_op_name(op));
          }
        }
      }
    });
  }
}

TEST(RegisteredMemory, AllgatherBroadcastAndRingShiftInAndOutOfPlace) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t count : registered_counts()) {
        for (DType dtype : {DType::kUInt8, DType::kFloat16, DType::kFloat64}) {
          for (bool in_place : {false, true}) {
            testing::fail_if(group,
                             testing::check_allgather(group, count, dtype, Algorithm::kShm,
                                                      in_place, Memory::kRegistered),
                             "world ", world, " count ", count, " ", dtype_name(dtype),
                             in_place ? " in place" : "");
          }
          for (int root = 0; root < world; ++root) {
            testing::fail_if(group,
                             testing::check_broadcast(group, count, dtype, root, Algorithm::kShm,
                                                      Memory::kRegistered),
                             "world ", world, " count ", count, " root ", root);
          }
          testing::fail_if(
              group,
              testing::check_ring_shift(group, count, dtype, Algorithm::kShm, Memory::kRegistered),
              "ring_shift, world ", world, " count ", count);
        }
      }
    });
  }
}

// Out of place: the input is private, the output registered (copied in, then reduced in place).
TEST(RegisteredMemory, AllreduceIntoARegisteredOutputAtAnyOffset) {
  constexpr size_t kCount = 70001;
  auto groups = testing::make_tcp_groups(3, testing::quick_options());
  testing::run_ranks(3, [&](int rank) {
    Group& group = *groups[static_cast<size_t>(rank)];
    auto memory = group.allocate_registered((kCount + 64) * sizeof(float));
    // Every rank its own offset into the same allocation.
    float* out = memory->as<float>() + 8 * rank;
    std::vector<float> in(kCount);
    for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((rank + 1) * (i % 1000));
    group.allreduce(make_buffer(in), memory->buffer(out, kCount, DType::kFloat32));
    size_t wrong = 0;
    for (size_t i = 0; i < kCount; ++i) wrong += out[i] != static_cast<float>(6 * (i % 1000));
    testing::fail_if(group, wrong ? std::to_string(wrong) + " wrong" : "", "rank ", rank);
  });
}

// An output over the start of the rank's own input, where the peers read it (not its own block,
// which is the in-place form): the staged path allows it, and so must the in-place one.
TEST(RegisteredMemory, OutputsOverlappingTheInputElsewhere) {
  constexpr size_t kCount = 5003;  // per rank's block
  auto groups = testing::make_tcp_groups(3, testing::quick_options());
  testing::run_ranks(3, [&](int rank) {
    Group& group = *groups[static_cast<size_t>(rank)];
    auto memory = group.allocate_registered(3 * kCount * sizeof(int32_t));
    auto* data = memory->as<int32_t>();
    for (size_t i = 0; i < 3 * kCount; ++i) data[i] = static_cast<int32_t>((rank + 1) * i);
    group.reduce_scatter(memory->buffer(data, 3 * kCount, DType::kInt32),
                         memory->buffer(data, kCount, DType::kInt32));
    size_t wrong = 0;
    for (size_t i = 0; i < kCount; ++i) {
      wrong += data[i] != static_cast<int32_t>(6 * (rank * kCount + i));
    }
    testing::fail_if(group, wrong ? std::to_string(wrong) + " wrong" : "", "reduce_scatter, rank ",
                     rank);
    for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<int32_t>(rank * 100000 + i);
    group.allgather(memory->buffer(data, kCount, DType::kInt32),
                    memory->buffer(data, 3 * kCount, DType::kInt32));
    for (size_t i = 0; i < 3 * kCount; ++i) {
      wrong += data[i] != static_cast<int32_t>((i / kCount) * 100000 + i % kCount);
    }
    testing::fail_if(group, wrong ? std::to_string(wrong) + " wrong" : "", "allgather, rank ",
                     rank);
  });
}

// Note [Registered buffers]: private memory on one rank and registered on another, or two
// allocations, would have a rank read memory that is not there; every rank says so instead.
TEST(RegisteredMemory, MixedMemoryIsAnErrorOnEveryRank) {
  for (const bool two_allocations : {false, true}) {
    SCOPED_TRACE(two_allocations ? "two allocations" : "registered and private");
    auto groups = testing::make_tcp_groups(2, testing::quick_options());
    std::vector<std::string> errors(2);
    testing::run_ranks(2, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      auto first = group.allocate_registered(4096);
      auto second = group.allocate_registered(4096);
      std::vector<float> own(1024, 1.0f);
      const Buffer data = rank == 0         ? first->buffer<float>(0, 1024)
                          : two_allocations ? second->buffer<float>(0, 1024)
                                            : make_buffer(own);
      try {
        group.allreduce(data);
      } catch (const MismatchError& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
    for (const std::string& error : errors) {
      EXPECT_NE(error.find("rank 0 passed registered memory #1"), std::string::npos) << error;
      EXPECT_NE(error.find(two_allocations ? "registered memory #2" : "private memory"),
                std::string::npos)
          << error;
    }
  }
}

TEST(RegisteredMemory, SizesThatDifferAcrossRanksAreAMismatch) {
  auto groups = testing::make_tcp_groups(2, testing::quick_options());
  std::vector<std::string> errors(2);
  testing::run_ranks(2, [&](int rank) {
    try {
      groups[static_cast<size_t>(rank)]->allocate_registered(rank == 0 ? 4096 : 8192);
    } catch (const MismatchError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("Group::allocate_registered"), std::string::npos) << error;
  }
}

// Without shared memory the memory is private and every collective takes it as before.
TEST(RegisteredMemory, IsPrivateWithoutSharedMemoryAndCollectivesStillWork) {
  GroupOptions options = testing::quick_options();
  options.shared_memory = false;
  auto groups = testing::make_tcp_groups(2, options);
  testing::run_ranks(2, [&](int rank) {
    Group& group = *groups[static_cast<size_t>(rank)];
    auto probe = group.allocate_registered(64);
    testing::fail_if(group, probe->shared() ? "shared without shared memory" : "", "rank ", rank);
    testing::fail_if(group,
                     testing::check_allreduce(group, 4099, DType::kFloat32, ReduceOp::kSum,
                                              Algorithm::kAuto, Memory::kRegistered),
                     "rank ", rank);
  });
}

// The memory outlives the group that allocated it (and the peers' copies stay mapped).
TEST(RegisteredMemory, OutlivesItsGroup) {
  std::vector<std::shared_ptr<RegisteredMemory>> kept(2);
  {
    auto groups = testing::make_tcp_groups(2, testing::quick_options());
    testing::run_ranks(2, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      kept[static_cast<size_t>(rank)] = group.allocate_registered(1024 * sizeof(float));
      std::fill_n(kept[static_cast<size_t>(rank)]->as<float>(), 1024, 2.0f);
      group.allreduce(kept[static_cast<size_t>(rank)]->buffer<float>(0, 1024));
    });
  }
  for (const auto& memory : kept) EXPECT_EQ(memory->as<float>()[1023], 4.0f);
}

// Two nodes of two ranks ("a", "b" stand in for hosts): the phases inside each node run in
// place, the phase between them over TCP.
TEST(RegisteredMemory, HierarchicalAllreduceAcrossTwoNodes) {
  const std::vector<std::string> node_of = {"a", "a", "b", "b"};
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::shared_ptr<Group>> groups(4);
  testing::run_ranks(4, [&](int rank) {
    GroupOptions options = testing::quick_options();
    options.host = "127.0.0.1";
    options.node_id = node_of[static_cast<size_t>(rank)];
    groups[static_cast<size_t>(rank)] = Group::create(store, rank, 4, options);
  });
  testing::run_ranks(4, [&](int rank) {
    Group& group = *groups[static_cast<size_t>(rank)];
    auto probe = group.allocate_registered(64);
    testing::fail_if(group, probe->shared() ? "" : "not shared", "rank ", rank);
    for (size_t count : registered_counts()) {
      for (DType dtype : {DType::kFloat32, DType::kInt64, DType::kBFloat16}) {
        for (ReduceOp op : testing::all_ops()) {
          testing::fail_if(group,
                           testing::check_allreduce(group, count, dtype, op,
                                                    Algorithm::kHierarchical, Memory::kRegistered),
                           "count ", count, " ", dtype_name(dtype), " ", reduce_op_name(op));
        }
      }
    }
  });
}

std::shared_ptr<TcpStore> store_server() {
  TcpStoreOptions options;
  options.is_server = true;
  options.timeout = 30s;
  return std::make_shared<TcpStore>(options);
}

// The survivors keep their mappings of the dead rank's memory: a PeerError naming it, no
// crash, and nothing in /dev/shm (the copies never had a name there).
TEST(RegisteredMemory, ARankKilledWhileTheOthersReadItsMemory) {
  auto store = store_server();
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back(std::vector<std::string>{COHORT_TEST_WORKER, std::to_string(store->port()),
                                                std::to_string(r), "3", "registered_loop"},
                       std::vector<std::string>{});
  }
  for (auto& r : ranks) ASSERT_EQ(r.wait_for_line("SHARED", 30s), "SHARED") << r.output();
  for (auto& r : ranks) ASSERT_EQ(r.wait_for_line("LOOPING", 30s), "LOOPING") << r.output();
  ranks[1].kill(SIGKILL);
  for (int r : {0, 2}) {
    const std::string line = ranks[static_cast<size_t>(r)].wait_for_line("RESULT ", 15s);
    EXPECT_NE(line.find("RESULT PeerError failed_rank=1"), std::string::npos)
        << line << "\n"
        << ranks[static_cast<size_t>(r)].output();
    EXPECT_EQ(ranks[static_cast<size_t>(r)].wait(10s), 0) << ranks[static_cast<size_t>(r)].output();
  }
  for (const auto& r : ranks) EXPECT_EQ(testing::shm_segments_of(r.pid()), std::set<std::string>{});
}

}  // namespace
}  // namespace cohort
