// Groups that span several "hosts": topology found at creation (GroupOptions::node_id stands
// in for real hosts, so ranks that are threads of this process form several nodes), the
// hierarchical allreduce chosen and exact across nodes of shared memory, flat algorithms where
// the nodes are uneven, and a dead rank named by every survivor.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "cohort/comm/memory_store.h"
#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"
#include "support/process.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

// Ranks as threads over TCP; rank r runs on node node_of[r].
std::vector<std::shared_ptr<Group>> make_nodes(const std::vector<std::string>& node_of) {
  const int world = static_cast<int>(node_of.size());
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::shared_ptr<Group>> groups(static_cast<size_t>(world));
  testing::run_ranks(world, [&](int rank) {
    GroupOptions options = testing::quick_options();
    options.host = "127.0.0.1";
    options.node_id = node_of[static_cast<size_t>(rank)];
    groups[static_cast<size_t>(rank)] = Group::create(store, rank, world, options);
  });
  return groups;
}

TEST(Topology, TwoNodesOfTwoRanksChooseHierarchicalAllreduce) {
  auto groups = make_nodes({"a", "a", "b", "b"});
  for (int rank = 0; rank < 4; ++rank) {
    const Group& group = *groups[static_cast<size_t>(rank)];
    EXPECT_EQ(group.num_nodes(), 2);
    EXPECT_EQ(group.local_size(), 2);
    EXPECT_EQ(group.node_rank(), rank / 2);
    EXPECT_EQ(group.local_rank(), rank % 2);
    for (size_t bytes : {size_t{1} << 20, size_t{64} << 20}) {
      EXPECT_EQ(group.algorithm_for(CollectiveKind::kAllreduce, bytes), Algorithm::kHierarchical)
          << bytes << " bytes";
    }
    // Shared memory spans a node only: the single-node variants are not offered.
    EXPECT_NE(group.algorithm_for(CollectiveKind::kBroadcast, 1 << 20), Algorithm::kShm);
  }
}

TEST(Topology, NodesAreNumberedByTheirLowestRank) {
  auto groups = make_nodes({"y", "x", "y", "z", "x"});
  const int node_of[] = {0, 1, 0, 2, 1};
  const int local_of[] = {0, 0, 1, 0, 1};
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_EQ(groups[static_cast<size_t>(rank)]->node_rank(), node_of[rank]);
    EXPECT_EQ(groups[static_cast<size_t>(rank)]->local_rank(), local_of[rank]);
    EXPECT_EQ(groups[static_cast<size_t>(rank)]->num_nodes(), 3);
  }
}

void sweep_allreduce(const std::vector<std::string>& node_of, Algorithm algorithm) {
  auto groups = make_nodes(node_of);
  const int world = static_cast<int>(node_of.size());
  testing::run_ranks(world, [&](int rank) {
    Group& group = *groups[static_cast<size_t>(rank)];
    // 256 KiB slots: sizes below, at and across several round boundaries, and fewer elements
    // than ranks.
    for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{65537}, size_t{300001}}) {
      for (DType dtype : testing::all_dtypes()) {
        for (ReduceOp op : testing::all_ops()) {
          testing::allreduce_sweep_case(group, count, dtype, op, algorithm);
        }
      }
    }
  });
}

TEST(HierarchicalAllreduce, TwoNodesOfTwo) { sweep_allreduce({"a", "a", "b", "b"}, Algorithm::kHierarchical); }
TEST(HierarchicalAllreduce, ThreeNodesOfTwo) {
  sweep_allreduce({"a", "a", "b", "b", "c", "c"}, Algorithm::kHierarchical);
}
TEST(HierarchicalAllreduce, TwoNodesOfThreeInterleaved) {
  sweep_allreduce({"a", "b", "a", "b", "a", "b"}, Algorithm::kHierarchical);
}

TEST(HierarchicalAllreduce, UnevenNodesFallBackToAFlatAlgorithm) {
  auto groups = make_nodes({"a", "a", "b"});
  for (const auto& group : groups) {
    EXPECT_EQ(group->local_size(), group->node_rank() == 0 ? 2 : 1);
    const Algorithm chosen = group->algorithm_for(CollectiveKind::kAllreduce, 64 << 20);
    EXPECT_NE(chosen, Algorithm::kHierarchical);
    CollectiveOptions asked;
    asked.algorithm = Algorithm::kHierarchical;
    EXPECT_EQ(group->algorithm_for(CollectiveKind::kAllreduce, 64 << 20, asked), chosen);
  }
  sweep_allreduce({"a", "a", "b"}, Algorithm::kHierarchical);
}

TEST(HierarchicalAllreduce, SubgroupsKeepTheirMembersNodes) {
  auto groups = make_nodes({"a", "a", "b", "b"});
  testing::run_ranks(4, [&](int rank) {
    auto sub = groups[static_cast<size_t>(rank)]->split(rank % 2, rank);  // {0, 2} and {1, 3}
    EXPECT_EQ(sub->num_nodes(), 2);
    EXPECT_EQ(sub->local_size(), 1);
    EXPECT_EQ(sub->node_rank(), rank / 2);
    std::vector<float> data(1000, static_cast<float>(rank));
    sub->allreduce(make_buffer(data));
    EXPECT_EQ(data[999], static_cast<float>(rank % 2 == 0 ? 0 + 2 : 1 + 3));
  });
}

// Every rank chooses with rank 0's cost model; when rank 0 cannot read the file it was told to
// use, every rank fails with a ConfigError instead of waiting for a model that never comes.
TEST(Topology, ABrokenCostModelFailsEveryRank) {
  const std::string path = ::testing::TempDir() + "cohort_broken_cost_model.json";
  std::ofstream(path) << "{\"version\": 1}";
  ::setenv("COHORT_COST_MODEL", path.c_str(), 1);
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(2);
  testing::run_ranks(2, [&](int rank) {
    try {
      Group::create(store, rank, 2, testing::quick_options());
    } catch (const ConfigError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  ::unsetenv("COHORT_COST_MODEL");
  std::remove(path.c_str());
  EXPECT_NE(errors[0].find(path), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 could not read its cost model"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[1].find(path), std::string::npos) << errors[1];
}

TEST(HierarchicalAllreduce, EveryRankNamesAKilledRank) {
  TcpStoreOptions store_options;
  store_options.is_server = true;
  store_options.timeout = 30s;
  TcpStore store(store_options);
  std::vector<testing::ChildProcess> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back(
        std::vector<std::string>{COHORT_TEST_WORKER, std::to_string(store.port()),
                                 std::to_string(r), "4", "allreduce_loop"},
        std::vector<std::string>{"COHORT_NODE_ID=node" + std::to_string(r / 2),
                                 "COHORT_ALGO=hierarchical"});
  }
  for (auto& r : ranks) ASSERT_EQ(r.wait_for_line("READY", 30s), "READY") << r.output();
  ranks[3].kill(SIGKILL);
  for (int r = 0; r < 3; ++r) {
    const std::string line = ranks[static_cast<size_t>(r)].wait_for_line("RESULT ", 15s);
    EXPECT_NE(line.find("RESULT PeerError failed_rank=3"), std::string::npos)
        << "rank " << r << ": " << line;
    ranks[static_cast<size_t>(r)].wait(10s);
  }
}

}  // namespace
}  // namespace cohort
