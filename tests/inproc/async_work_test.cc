// Async collectives: several in flight at once on one group, waited in any order; each Work
// reports completion; a blocking collective issued behind them runs after them; a failure
// stays in its Work and is rethrown by wait().
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

class AsyncWork : public ::testing::TestWithParam<int> {};

TEST_P(AsyncWork, ManyInFlightWaitedInAnyOrder) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  constexpr int kRounds = 4;
  constexpr size_t kCount = 1001;
  const auto n = static_cast<size_t>(world);
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    std::mt19937 random(static_cast<unsigned>(rank));
    for (int round = 0; round < kRounds; ++round) {
      const Algorithm algorithm = round % 2 == 0 ? Algorithm::kAuto : Algorithm::kRing;
      CollectiveOptions opts;
      opts.algorithm = algorithm;
      // Four allreduces over different buffers, a broadcast, an allgather, a reduce_scatter.
      std::vector<std::vector<float>> sums(4, std::vector<float>(kCount));
      for (auto& s : sums)
        testing::fill_sweep(s.data(), kCount, DType::kFloat32, ReduceOp::kSum, rank);
      std::vector<int64_t> bcast(kCount);
      testing::fill_movement(bcast.data(), kCount, DType::kInt64, rank);
      std::vector<int32_t> gather_in(kCount), gather_out(n * kCount);
      testing::fill_movement(gather_in.data(), kCount, DType::kInt32, rank);
      std::vector<double> rs_in(n * kCount), rs_out(kCount);
      testing::fill_sweep(rs_in.data(), n * kCount, DType::kFloat64, ReduceOp::kSum, rank);

      std::vector<std::pair<std::string, std::shared_ptr<Work>>> works;
      for (size_t i = 0; i < sums.size(); ++i) {
        works.emplace_back("allreduce " + std::to_string(i),
                           group.allreduce_async(make_buffer(sums[i]), opts));
      }
      CollectiveOptions root_opts = opts;
      root_opts.root = world - 1;
      works.emplace_back("broadcast", group.broadcast_async(make_buffer(bcast), root_opts));
      works.emplace_back("allgather", group.allgather_async(make_buffer(gather_in),
                                                            make_buffer(gather_out), opts));
      works.emplace_back("reduce_scatter",
                         group.reduce_scatter_async(make_buffer(rs_in), make_buffer(rs_out), opts));
      std::shuffle(works.begin(), works.end(), random);
      for (auto& [name, work] : works) {
        work->wait();
        testing::fail_if(group, work->is_completed() ? "" : "is_completed() false after wait()",
                         name);
      }
      for (auto& s : sums) {
        testing::fail_if(
            group, testing::check_sweep(s.data(), kCount, DType::kFloat32, ReduceOp::kSum, world),
            "async allreduce round ", round);
      }
      testing::fail_if(group,
                       testing::check_movement(
                           bcast.data(), kCount, DType::kInt64, [&](size_t) { return world - 1; },
                           [](size_t i) { return i; }),
                       "async broadcast round ", round);
      testing::fail_if(group,
                       testing::check_movement(
                           gather_out.data(), n * kCount, DType::kInt32,
                           [&](size_t i) { return static_cast<int>(i / kCount); },
                           [&](size_t i) { return i % kCount; }),
                       "async allgather round ", round);
      testing::fail_if(group,
                       testing::check_sweep(rs_out.data(), kCount, DType::kFloat64, ReduceOp::kSum,
                                            world, static_cast<size_t>(rank) * kCount),
                       "async reduce_scatter round ", round);
    }
  });
}

// A blocking collective issued while async ones are queued runs after them, in issue order.
TEST_P(AsyncWork, BlockingCallAfterAsyncOnesSeesTheirResults) {
  const int world = GetParam();
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    std::vector<int64_t> data(257, 1);
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 3; ++i) works.push_back(group.allreduce_async(make_buffer(data)));
    // Issued last: by the time it runs, data is world^3 everywhere, so the sum is world^4.
    group.allreduce(make_buffer(data));
    for (auto& work : works) {
      testing::fail_if(group, work->is_completed() ? "" : "an earlier Work is not complete",
                       "world ", world);
    }
    const int64_t want = static_cast<int64_t>(world) * world * world * world;
    testing::fail_if(group, data[256] == want ? "" : "got " + std::to_string(data[256]),
                     "chained allreduce world ", world);
  });
}

// An error inside an async collective is kept in its Work and rethrown from wait(); the group
// is broken afterwards and says so on later calls.
TEST(AsyncWorkErrors, FailureIsRethrownFromWait) {
  auto groups = make_inproc_groups(2, testing::quick_options(std::chrono::milliseconds(300)));
  run_ranks(2, [&](int rank) {
    std::vector<float> data(rank == 0 ? 8 : 9, 1.0f);  // mismatched counts
    auto work = groups[rank]->allreduce_async(make_buffer(data));
    EXPECT_THROW(work->wait(), Error);
    EXPECT_TRUE(work->is_completed());
    EXPECT_THROW(groups[rank]->barrier(), Error);
  });
}

INSTANTIATE_TEST_SUITE_P(World, AsyncWork, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
