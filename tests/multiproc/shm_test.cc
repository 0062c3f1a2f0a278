// The shared-memory collectives (algorithms/*_shm.cc) that Group::create picks when every rank
// runs on this host: every dtype, op and size across round boundaries, and no segment left
// behind in /dev/shm however the ranks end (Note [Shared-memory lifetime]).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "cohort/comm/tcp_store.h"
#include "support/collective_checks.h"
#include "support/process.h"
#include "support/sync.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

TEST(ShmAllreduce, EveryDtypeOpAndSizeAcrossChunks) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      // 256 KiB chunks: sizes below, at and across several chunk boundaries.
      for (size_t count :
           {size_t{0}, size_t{1}, size_t{5}, size_t{65536}, size_t{65537}, size_t{300001}}) {
        for (DType dtype : testing::all_dtypes()) {
          for (ReduceOp op : testing::all_ops()) {
            testing::allreduce_sweep_case(*groups[rank], count, dtype, op, Algorithm::kShm);
          }
        }
      }
    });
  }
}

// Bytes across several 256 KiB rounds, an odd tail, and less than one part per rank.
const size_t kByteCounts[] = {0, 1, 7, 262144, 262147, 1000003};

TEST(ShmCollectives, ChosenForEveryCollectiveThatHasThem) {
  auto groups = testing::make_tcp_groups(3, testing::quick_options());
  for (const auto& group : groups) {
    EXPECT_EQ(group->num_nodes(), 1);
    EXPECT_EQ(group->local_size(), 3);
    for (CollectiveKind kind :
         {CollectiveKind::kAllreduce, CollectiveKind::kBroadcast, CollectiveKind::kAllgather,
          CollectiveKind::kReduceScatter, CollectiveKind::kRingShift, CollectiveKind::kBarrier}) {
      for (size_t bytes : {size_t{4096}, size_t{64} << 20}) {
        EXPECT_EQ(group->algorithm_for(kind, bytes), Algorithm::kShm) << collective_name(kind);
      }
    }
  }
}

TEST(ShmCollectives, BroadcastFromEveryRoot) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t bytes : kByteCounts) {
        for (int root = 0; root < world; ++root) {
          std::vector<uint8_t> data(bytes);
          for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(rank * 31 + i % 251);
          CollectiveOptions options;
          options.root = root;
          options.algorithm = Algorithm::kShm;
          group.broadcast(Buffer{data.data(), bytes, DType::kUInt8}, options);
          size_t wrong = 0;
          for (size_t i = 0; i < bytes; ++i) {
            wrong += data[i] != static_cast<uint8_t>(root * 31 + i % 251);
          }
          testing::fail_if(group, wrong ? std::to_string(wrong) + " bytes wrong" : "", "world ",
                           world, " root ", root, " bytes ", bytes);
        }
      }
    });
  }
}

TEST(ShmCollectives, AllgatherOfEveryBlockSize) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t block : kByteCounts) {
        std::vector<uint8_t> in(block);
        for (size_t i = 0; i < block; ++i) in[i] = static_cast<uint8_t>(rank * 17 + i % 253);
        std::vector<uint8_t> out(block * static_cast<size_t>(world) + 1, 0xee);
        CollectiveOptions options;
        options.algorithm = Algorithm::kShm;
        group.allgather(ConstBuffer{in.data(), block, DType::kUInt8},
                        Buffer{out.data(), block * static_cast<size_t>(world), DType::kUInt8},
                        options);
        size_t wrong = out.back() != 0xee;  // nothing written past the end
        for (int r = 0; r < world; ++r) {
          for (size_t i = 0; i < block; ++i) {
            wrong +=
                out[static_cast<size_t>(r) * block + i] != static_cast<uint8_t>(r * 17 + i % 253);
          }
        }
        testing::fail_if(group, wrong ? std::to_string(wrong) + " bytes wrong" : "", "world ",
                         world, " block ", block);
      }
    });
  }
}

TEST(ShmCollectives, RingShiftOfEverySizeAcrossRounds) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      for (size_t bytes : kByteCounts) {
        for (DType dtype : {DType::kUInt8, DType::kFloat32}) {
          const size_t count = bytes / dtype_size(dtype);
          testing::fail_if(group, testing::check_ring_shift(group, count, dtype, Algorithm::kShm),
                           "world ", world, " count ", count, " ", dtype_name(dtype));
        }
      }
    });
  }
}

TEST(ShmCollectives, ReduceScatterEveryDtypeAndOp) {
  for (int world : {2, 3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      std::vector<size_t> blocks = {0, 1, 3, 65536, 100003};
      if (testing::small_scale()) blocks.pop_back();  // minutes under TSan (the sanitizer legs)
      for (size_t block : blocks) {
        for (DType dtype : testing::all_dtypes()) {
          for (ReduceOp op : testing::all_ops()) {
            const size_t total = block * static_cast<size_t>(world);
            std::vector<uint8_t> in(total * dtype_size(dtype) + 1);
            testing::fill_sweep(in.data(), total, dtype, op, rank);
            std::vector<uint8_t> out(block * dtype_size(dtype) + 1);
            CollectiveOptions options;
            options.op = op;
            options.algorithm = Algorithm::kShm;
            group.reduce_scatter(ConstBuffer{in.data(), total, dtype},
                                 Buffer{out.data(), block, dtype}, options);
            testing::fail_if(group,
                             testing::check_sweep(out.data(), block, dtype, op, world,
                                                  block * static_cast<size_t>(rank)),
                             "world ", world, " block ", block, " ", dtype_name(dtype), " ",
                             reduce_op_name(op));
            testing::fail_if(
                group,
                testing::check_reduce_scatter_in_place(group, block, dtype, op, Algorithm::kShm),
                "in place, world ", world, " block ", block, " ", dtype_name(dtype), " ",
                reduce_op_name(op));
          }
        }
      }
    });
  }
}

// Note [Reduction order] (src/comm/algorithms/algorithms.h): on one host every element is
// combined in rank order, ((x0 + x1) + x2) + x3, whichever rank owns its piece and whether it
// is reduced in place, so that DDP's allreduce and ZeRO's and FSDP's reduce-scatter give the
// same bits. Rank r's elements are of magnitude 10^(4r) with random signs and mantissas, so
// float32 sums in any other order round differently; the expected values are the rank-order
// fold computed here. Allreduce below and above the one-round size, reduce-scatter out of and
// in place.
float rank_value(int rank, size_t i) {
  // splitmix64 of (i, rank): a mantissa in [-1, 1), cheap enough for every element of a sweep
  uint64_t z =
      (static_cast<uint64_t>(i) << 8 | static_cast<uint64_t>(rank)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const float mantissa = static_cast<float>(z >> 40) / static_cast<float>(1 << 23) - 1.0f;
  static const float kScale[] = {1.0f, 1e4f, 1e8f};
  return mantissa * kScale[rank % 3];
}

float rank_order_sum(int world, size_t i) {
  float sum = rank_value(0, i);
  for (int r = 1; r < world; ++r) sum += rank_value(r, i);
  return sum;
}

std::string first_difference(const std::vector<float>& got, int world, size_t first_element) {
  for (size_t i = 0; i < got.size(); ++i) {
    const float want = rank_order_sum(world, first_element + i);
    if (std::memcmp(&got[i], &want, sizeof(float)) != 0) {
      return "element " + std::to_string(first_element + i) + ": " + std::to_string(got[i]) +
             ", the rank-order sum is " + std::to_string(want);
    }
  }
  return "";
}

TEST(ShmCollectives, EveryElementIsSummedInRankOrder) {
  for (int world : {3, 4}) {
    auto groups = testing::make_tcp_groups(world, testing::quick_options());
    testing::run_ranks(world, [&](int rank) {
      Group& group = *groups[static_cast<size_t>(rank)];
      CollectiveOptions options;
      options.algorithm = Algorithm::kShm;
      for (size_t count : {size_t{600}, size_t{200003}}) {  // one round; several slots
        std::vector<float> data(count);
        for (size_t i = 0; i < count; ++i) data[i] = rank_value(rank, i);
        group.allreduce(Buffer{data.data(), count, DType::kFloat32}, options);
        testing::fail_if(group, first_difference(data, world, 0), "allreduce, world ", world,
                         " count ", count);
      }
      const size_t block = 70001;
      const size_t total = block * static_cast<size_t>(world);
      std::vector<float> in(total), out(block);
      for (size_t i = 0; i < total; ++i) in[i] = rank_value(rank, i);
      group.reduce_scatter(ConstBuffer{in.data(), total, DType::kFloat32},
                           Buffer{out.data(), block, DType::kFloat32}, options);
      const size_t mine = block * static_cast<size_t>(rank);
      testing::fail_if(group, first_difference(out, world, mine), "reduce_scatter, world ", world);
      // In place: the output is this rank's own block of the input.
      group.reduce_scatter(ConstBuffer{in.data(), total, DType::kFloat32},
                           Buffer{in.data() + mine, block, DType::kFloat32}, options);
      const std::vector<float> own(in.begin() + static_cast<long>(mine),
                                   in.begin() + static_cast<long>(mine + block));
      testing::fail_if(group, first_difference(own, world, mine), "reduce_scatter in place, world ",
                       world);
    });
  }
}

TEST(ShmCollectives, BarrierWaitsForTheLastRank) {
  auto groups = testing::make_tcp_groups(3, testing::quick_options());
  testing::EventCount arrived;
  testing::run_ranks(3, [&](int rank) {
    for (int round = 1; round <= 50; ++round) {
      // Rank round % 3 comes last: once the other two have arrived (they may be in the barrier).
      if (rank == round % 3 && !arrived.wait_for(3 * round - 1, std::chrono::seconds(60))) {
        throw std::runtime_error("the others never arrived in round " + std::to_string(round));
      }
      arrived.add();
      CollectiveOptions options;
      options.algorithm = Algorithm::kShm;
      groups[static_cast<size_t>(rank)]->barrier(options);
      const int seen = arrived.value();
      testing::fail_if(*groups[static_cast<size_t>(rank)],
                       seen < 3 * round ? "left before every rank arrived" : "", "round ", round,
                       " saw ", seen);
      groups[static_cast<size_t>(rank)]->barrier(options);  // nobody starts the next round early
    }
  });
}

std::shared_ptr<TcpStore> store_server() {
  TcpStoreOptions options;
  options.is_server = true;
  options.timeout = 30s;
  return std::make_shared<TcpStore>(options);
}

std::vector<testing::ChildProcess> start_ranks(const TcpStore& store, int size,
                                               const std::string& scenario,
                                               const std::vector<std::string>& env = {}) {
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back(std::vector<std::string>{COHORT_TEST_WORKER, std::to_string(store.port()),
                                                std::to_string(r), std::to_string(size), scenario},
                       env);
  }
  return ranks;
}

// These look only at the names this job's creator made: other tests running beside this one
// (ctest -j) create and unlink segments of their own in the same /dev/shm.
// Issue 35: a peer that had closed its group (destroyed it, or ended normally) was reported as
// dead, or, in this process, only at the deadline.
TEST(ShmCollectives, APeerThatClosedItsGroupIsNamedAsSuch) {
  auto groups = testing::make_tcp_groups(2, testing::quick_options(std::chrono::seconds(60)));
  groups[1].reset();
  std::vector<float> data(1024, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    groups[0]->allreduce(make_buffer(data));
    FAIL() << "the allreduce went through without rank 1";
  } catch (const PeerError& e) {
    EXPECT_EQ(e.failed_rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1 (pid "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(") closed its group"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(ShmSegments, NothingIsLeftAfterANormalExit) {
  auto store = store_server();
  auto ranks = start_ranks(*store, 3, "allreduce_once");
  for (auto& r : ranks) EXPECT_EQ(r.wait(60s), 0) << r.output();
  EXPECT_EQ(testing::shm_segments_of(ranks[0].pid()), std::set<std::string>{});
}

TEST(ShmSegments, NothingIsLeftWhenARankIsKilled) {
  auto store = store_server();
  auto ranks = start_ranks(*store, 3, "allreduce_loop");
  for (auto& r : ranks) ASSERT_EQ(r.wait_for_line("READY", 30s), "READY") << r.output();
  // Unlinked as soon as every rank attached.
  EXPECT_EQ(testing::shm_segments_of(ranks[0].pid()), std::set<std::string>{});
  ranks[2].kill(SIGKILL);
  for (int r = 0; r < 2; ++r) {
    const std::string line = ranks[r].wait_for_line("RESULT ", 15s);
    EXPECT_NE(line.find("RESULT PeerError failed_rank=2"), std::string::npos) << line << "\n"
                                                                              << ranks[r].output();
    ranks[r].wait(10s);
  }
  EXPECT_EQ(testing::shm_segments_of(ranks[0].pid()), std::set<std::string>{});
}

// Note [Shared-memory lifetime]: a rank ended at any step of the window's creation, by SIGKILL
// or SIGTERM, alone or with every other rank (an interrupted launcher), leaves no name behind.
// The worker ends itself exactly at the step (ShmWindow::set_creation_hook), so every case is
// the same on every run.
struct CreationKill {
  const char* step;
  int rank;
  int signal;
  const char* who;  // "self": that rank only; "all": every rank at that moment
};

std::string describe(const CreationKill& k) {
  return std::string(k.who) + " signal " + std::to_string(k.signal) + " when rank " +
         std::to_string(k.rank) + " reaches " + k.step;
}

TEST(ShmSegments, NothingIsLeftWhenRanksAreEndedDuringCreation) {
  std::vector<CreationKill> cases;
  for (int signal : {SIGKILL, SIGTERM}) {
    for (const char* who : {"self", "all"}) {
      if (signal == SIGKILL && std::string(who) == "all") continue;  // the launcher's part
      for (const char* step : {"named", "created", "published"})
        cases.push_back({step, 0, signal, who});
      for (const char* step : {"opened", "attached"}) {
        for (int rank : {0, 2}) cases.push_back({step, rank, signal, who});
      }
    }
  }
  for (const CreationKill& k : cases) {
    SCOPED_TRACE(describe(k));
    auto store = store_server();
    const std::string plan = std::string("COHORT_TEST_SHM_KILL=") + k.step + ":" +
                             std::to_string(k.rank) + ":" + std::to_string(k.signal) + ":" + k.who;
    auto ranks = start_ranks(*store, 3, "allreduce_once", {plan, "COHORT_TIMEOUT_S=30"});
    std::vector<int> status;
    for (auto& r : ranks) status.push_back(r.wait(60s));
    for (size_t r = 0; r < ranks.size(); ++r) {
      ASSERT_NE(status[r], -1) << "rank " << r << " did not end: " << ranks[r].output();
    }
    // The step was reached and the signal ended the rank there: the case did happen.
    EXPECT_EQ(status[static_cast<size_t>(k.rank)], 128 + k.signal) << ranks[k.rank].output();
    EXPECT_EQ(testing::shm_segments_of(ranks[0].pid()), std::set<std::string>{});
    for (const std::string& name : testing::shm_segments_of(ranks[0].pid())) {
      ::shm_unlink(("/" + name).c_str());  // one failing case must not fail the next ones
    }
  }
}

// A rank that dies before it attaches to the window (torchrun-style start, no cohortrun to
// notice) is named by the others within seconds, not at the deadline: its pid is known from
// the group's host exchange, so the survivors see its process gone.
TEST(ShmSegments, ARankThatDiesBeforeAttachingIsNamed) {
  auto store = store_server();
  // A deadline far beyond the wait below: only the dead process can end the survivors' wait.
  auto ranks = start_ranks(*store, 3, "allreduce_once",
                           {"COHORT_TEST_SHM_KILL=joining:2:9:self", "COHORT_TIMEOUT_S=120"});
  EXPECT_EQ(ranks[2].wait(30s), 128 + SIGKILL) << ranks[2].output();
  const std::string pid = "(pid " + std::to_string(ranks[2].pid()) + ")";
  for (int r = 0; r < 2; ++r) {
    const std::string line = ranks[r].wait_for_line("RESULT ", 30s);
    EXPECT_NE(line.find("RESULT PeerError failed_rank=2"), std::string::npos)
        << "rank " << r << ": " << line << "\n"
        << ranks[r].output();
    EXPECT_NE(line.find("rank 2 " + pid), std::string::npos) << line;
    EXPECT_NE(line.find("never attached"), std::string::npos) << line;
  }
  EXPECT_EQ(testing::shm_segments_of(ranks[0].pid()), std::set<std::string>{});
}

}  // namespace
}  // namespace cohort
