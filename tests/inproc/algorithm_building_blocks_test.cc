// The pieces the collective algorithms are built from, tested with segments far smaller than
// the real ones so that landing windows wrap many times: segmented send/receive, the
// power-of-two fold, and the algorithm choice (overrides, fallbacks, auto).
#include <gtest/gtest.h>

#include <set>

#include "choice/algorithm_choice.h"
#include "algorithms/primitives.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::run_ranks;

// Runs fn(ctx) on every rank of a bare in-process fabric (no Group): algorithms' view.
void with_contexts(int world, const std::function<void(algo::Context&)>& fn) {
  auto fabric = std::make_shared<InprocFabric>(world);
  run_ranks(world, [&](int rank) {
    InprocTransport transport(fabric, rank);
    std::vector<uint8_t> scratch;
    algo::Context ctx(transport, 0, Deadline::after(std::chrono::seconds(20)), scratch);
    fn(ctx);
  });
}

TEST(SegmentedTransfer, RecvCombineAcrossManyTinySegments) {
  for (size_t count : {0, 1, 3, 4, 12, 13, 50, 257}) {
    for (size_t seg : {1, 3, 4, 7}) {
      with_contexts(2, [&](algo::Context& ctx) {
        const int other = 1 - ctx.rank();
        std::vector<int32_t> mine(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) mine[i] = static_cast<int32_t>(i * 10 + ctx.rank());
        std::vector<uint8_t> window(algo::window_bytes(seg, sizeof(int32_t)));
        std::vector<std::unique_ptr<Request>> sends;
        algo::post_sends(ctx, other, 5, mine.data(), count, sizeof(int32_t), seg, sends);
        algo::recv_combine(ctx, other, 5, out.data(), mine.data(), count, DType::kInt32,
                           ReduceOp::kSum, seg, window.data());
        algo::wait_all(sends);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[i], static_cast<int32_t>(20 * i + 1))
              << "count " << count << " seg " << seg;
        }
      });
    }
  }
}

TEST(SegmentedTransfer, PostRecvsLandInPlaceAndInOrder) {
  with_contexts(2, [&](algo::Context& ctx) {
    constexpr size_t kCount = 1000;
    std::vector<uint8_t> data(kCount);
    std::vector<std::unique_ptr<Request>> requests;
    if (ctx.rank() == 0) {
      for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<uint8_t>(i * 13);
      algo::post_sends(ctx, 1, 9, data.data(), kCount, 1, 33, requests);
      algo::wait_all(requests);
    } else {
      algo::post_recvs(ctx, 0, 9, data.data(), kCount, 1, 33, requests);
      EXPECT_EQ(requests.size(), algo::segments_in(kCount, 33));
      algo::wait_all(requests);
      for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(data[i], static_cast<uint8_t>(i * 13));
    }
  });
}

TEST(PowerOfTwoFold, ParticipantsCoverEveryRankOnce) {
  for (int n = 1; n <= 70; ++n) {
    const algo::Fold fold(n);
    ASSERT_EQ(fold.p & (fold.p - 1), 0) << n;
    ASSERT_TRUE(fold.p <= n && 2 * fold.p > n) << n;
    std::set<int> seen;
    for (int i = 0; i < fold.p; ++i) {
      ASSERT_EQ(fold.participant(fold.rank_of(i)), i) << n;
      // Participant i stands for ranks [first_rank(i), first_rank(i+1)): one or two of them.
      const int width = fold.first_rank(i + 1) - fold.first_rank(i);
      ASSERT_TRUE(width == 1 || width == 2) << n;
      for (int r = fold.first_rank(i); r < fold.first_rank(i + 1); ++r) seen.insert(r);
    }
    ASSERT_EQ(fold.first_rank(0), 0);
    ASSERT_EQ(fold.first_rank(fold.p), n);
    ASSERT_EQ(static_cast<int>(seen.size()), n);
    int sitting_out = 0;
    for (int r = 0; r < n; ++r) sitting_out += fold.participant(r) < 0 ? 1 : 0;
    ASSERT_EQ(sitting_out, fold.rem) << n;
  }
}

// The variants each collective has (docs/algorithms.md).
std::set<Algorithm> variants(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce:
      return {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling, Algorithm::kDirect};
    case CollectiveKind::kBroadcast:
      return {Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect};
    case CollectiveKind::kReduce: return {Algorithm::kTree, Algorithm::kDirect};
    case CollectiveKind::kAllgather:
    case CollectiveKind::kReduceScatter:
      return {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kDirect};
    default: return {Algorithm::kDirect};
  }
}

TEST(AlgorithmChoice, OverridesFallbacksAndAuto) {
  const CollectiveKind kinds[] = {CollectiveKind::kAllreduce,     CollectiveKind::kBroadcast,
                                  CollectiveKind::kReduce,        CollectiveKind::kAllgather,
                                  CollectiveKind::kReduceScatter, CollectiveKind::kGather,
                                  CollectiveKind::kScatter,       CollectiveKind::kAllToAll,
                                  CollectiveKind::kRingShift,     CollectiveKind::kBarrier};
  const Algorithm requests[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling,
                                Algorithm::kDirect};
  for (CollectiveKind kind : kinds) {
    const auto has = variants(kind);
    for (int world = 1; world <= 64; ++world) {
      GroupShape shape;  // flat: one rank per node, no shared memory
      shape.world = world;
      shape.nodes = world;
      for (size_t bytes = 0; bytes <= (size_t{1} << 30); bytes = bytes * 4 + 1) {
        const CostModel model = CostModel::defaults();
        const Algorithm automatic = choose_algorithm(kind, Algorithm::kAuto, bytes, shape, model);
        ASSERT_TRUE(has.count(automatic))
            << collective_name(kind) << " auto picked " << algorithm_name(automatic);
        for (Algorithm request : requests) {
          const Algorithm chosen = choose_algorithm(kind, request, bytes, shape, model);
          ASSERT_EQ(chosen, has.count(request) ? request : automatic)
              << collective_name(kind) << " asked for " << algorithm_name(request);
        }
      }
    }
  }
}

}  // namespace
}  // namespace cohort
