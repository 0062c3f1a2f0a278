// The shared-memory allreduce (algorithms/allreduce_shm.cc) that Group::create picks when every
// rank runs on this host: every dtype, op and size across chunk boundaries, and no segment
// left behind in /dev/shm however the ranks end (Note [Shared-memory lifetime]).
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>

#include "cohort/comm/tcp_store.h"
#include "support/process.h"
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
            std::vector<uint8_t> data(count * dtype_size(dtype) + 1);
            testing::fill_sweep(data.data(), count, dtype, op, rank);
            CollectiveOptions options;
            options.op = op;
            options.algorithm = Algorithm::kShm;
            groups[rank]->allreduce(Buffer{data.data(), count, dtype}, options);
            testing::fail_if(
                *groups[rank], testing::check_sweep(data.data(), count, dtype, op, world), "world ",
                world, " count ", count, " ", dtype_name(dtype), " ", reduce_op_name(op));
          }
        }
      }
    });
  }
}

std::set<std::string> cohort_segments() {
  std::set<std::string> names;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("cohort-", 0) == 0) names.insert(name);
    }
    ::closedir(dir);
  }
  return names;
}

std::shared_ptr<TcpStore> store_server() {
  TcpStoreOptions options;
  options.is_server = true;
  options.timeout = 30s;
  return std::make_shared<TcpStore>(options);
}

std::vector<testing::ChildProcess> start_ranks(const TcpStore& store, int size,
                                               const std::string& scenario) {
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back(std::vector<std::string>{COHORT_TEST_WORKER, std::to_string(store.port()),
                                                std::to_string(r), std::to_string(size), scenario},
                       std::vector<std::string>{});
  }
  return ranks;
}

TEST(ShmSegments, NothingIsLeftAfterANormalExit) {
  const auto before = cohort_segments();
  auto store = store_server();
  auto ranks = start_ranks(*store, 3, "allreduce_once");
  for (auto& r : ranks) EXPECT_EQ(r.wait(60s), 0) << r.output();
  EXPECT_EQ(cohort_segments(), before);
}

TEST(ShmSegments, NothingIsLeftWhenARankIsKilled) {
  const auto before = cohort_segments();
  auto store = store_server();
  auto ranks = start_ranks(*store, 3, "allreduce_loop");
  for (auto& r : ranks) ASSERT_EQ(r.wait_for_line("READY", 30s), "READY") << r.output();
  EXPECT_EQ(cohort_segments(), before);  // unlinked as soon as every rank attached
  ranks[2].kill(SIGKILL);
  for (int r = 0; r < 2; ++r) {
    const std::string line = ranks[r].wait_for_line("RESULT ", 15s);
    EXPECT_NE(line.find("RESULT PeerError failed_rank=2"), std::string::npos) << line;
    ranks[r].wait(10s);
  }
  EXPECT_EQ(cohort_segments(), before);
}

}  // namespace
}  // namespace cohort
