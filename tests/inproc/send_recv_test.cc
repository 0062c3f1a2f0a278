// Point-to-point: messages match by (peer, tag) in issue order, whatever order the receiver
// asks for the tags in; several messages on one tag arrive in order; every dtype and count
// goes through; and send/recv between some ranks leaves the collective sequence of the group
// aligned for everyone.
#include <gtest/gtest.h>

#include "support/test_support.h"

namespace cohort {
namespace {

using testing::make_inproc_groups;
using testing::run_ranks;

constexpr uint32_t kTags = 3;
constexpr int kPerTag = 3;

// Message m (0..kPerTag-1) on `tag` from `from` to `to` carries values that name all four.
size_t message_offset(int to, uint32_t tag, int m) {
  return static_cast<size_t>(to) * 1000 + tag * 100 + static_cast<size_t>(m) * 10;
}

class SendRecvTest : public ::testing::TestWithParam<int> {};

TEST_P(SendRecvTest, TagsAndOrderBetweenEveryPair) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "no peer";
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    for (DType dtype : testing::all_dtypes()) {
      for (size_t count : testing::sweep_counts(world, 4001)) {
        const size_t bytes = count * dtype_size(dtype);
        // Send everything first (async), tags in ascending order...
        std::vector<std::vector<uint8_t>> outgoing;
        std::vector<std::shared_ptr<Work>> sends;
        for (int peer = 0; peer < world; ++peer) {
          if (peer == rank) continue;
          for (uint32_t tag = 0; tag < kTags; ++tag) {
            for (int m = 0; m < kPerTag; ++m) {
              outgoing.emplace_back(bytes + 1);
              testing::fill_movement(outgoing.back().data(), count, dtype, rank,
                                     message_offset(peer, tag, m));
              CollectiveOptions opts;
              opts.tag = tag;
              sends.push_back(
                  group.send_async(ConstBuffer{outgoing.back().data(), count, dtype}, peer, opts));
            }
          }
        }
        // ...then receive the tags in descending order: matching is per (peer, tag).
        for (int peer = 0; peer < world; ++peer) {
          if (peer == rank) continue;
          for (uint32_t tag = kTags; tag-- > 0;) {
            for (int m = 0; m < kPerTag; ++m) {
              std::vector<uint8_t> incoming(bytes + 1);
              CollectiveOptions opts;
              opts.tag = tag;
              group.recv(Buffer{incoming.data(), count, dtype}, peer, opts);
              const size_t offset = message_offset(rank, tag, m);
              testing::fail_if(group,
                               testing::check_movement(
                                   incoming.data(), count, dtype, [&](size_t) { return peer; },
                                   [&](size_t i) { return offset + i; }),
                               "recv from ", peer, " tag ", tag, " message ", m, " ",
                               dtype_name(dtype), " count ", count);
            }
          }
        }
        for (auto& work : sends) work->wait();
      }
    }
  });
}

// Only ranks 0 and 1 exchange messages; the collective after it still lines up on all ranks.
TEST_P(SendRecvTest, PointToPointKeepsCollectivesAligned) {
  const int world = GetParam();
  if (world == 1) GTEST_SKIP() << "no peer";
  auto groups = make_inproc_groups(world, testing::quick_options());
  run_ranks(world, [&](int rank) {
    Group& group = *groups[rank];
    const uint64_t before = group.sequence_number();
    std::vector<int32_t> message(5, rank);
    for (int i = 0; i < 4; ++i) {
      if (rank == 0) group.send(make_buffer(message), 1);
      if (rank == 1) {
        group.recv(make_buffer(message), 0);
        testing::fail_if(group, message[4] == 0 ? "" : "wrong payload", "p2p round ", i);
      }
    }
    std::vector<int32_t> sum(3, 1);
    group.allreduce(make_buffer(sum));
    testing::fail_if(group, sum[2] == world ? "" : "allreduce after p2p is wrong", "world ", world);
    testing::fail_if(group, group.sequence_number() == before + 1 ? "" : "sequence moved by p2p",
                     "world ", world);
  });
}

TEST(SendRecv, InvalidPeerIsRefused) {
  auto groups = make_inproc_groups(2, testing::quick_options());
  std::vector<float> data(4);
  EXPECT_THROW(groups[0]->send(make_buffer(data), 0), InvalidArgument);
  EXPECT_THROW(groups[0]->send(make_buffer(data), 2), InvalidArgument);
  EXPECT_THROW(groups[1]->recv(make_buffer(data), -1), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(World, SendRecvTest, ::testing::ValuesIn(testing::sweep_worlds()));

}  // namespace
}  // namespace cohort
