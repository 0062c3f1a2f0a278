// Topology from node keys: numbering, local ranks, uniformity, peers across nodes, subgroups.
#include "topology/topology.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(Topology, NodesInOrderOfTheirLowestRankLocalRanksInRankOrder) {
  const std::vector<std::string> keys = {"b", "a", "b", "c", "a", "b"};
  const int node_of[] = {0, 1, 0, 2, 1, 0};
  const int local_of[] = {0, 0, 1, 0, 1, 2};
  for (int rank = 0; rank < 6; ++rank) {
    const Topology t = Topology::from_node_keys(keys, rank);
    EXPECT_EQ(t.num_nodes(), 3);
    EXPECT_EQ(t.node_rank(), node_of[rank]);
    EXPECT_EQ(t.local_rank(), local_of[rank]);
    EXPECT_EQ(t.local_size(), node_of[rank] == 0 ? 3 : node_of[rank] == 1 ? 2 : 1);
    EXPECT_EQ(t.uniform_local_size(), 0);
  }
  EXPECT_EQ(Topology::from_node_keys(keys, 0).ranks_of_node(0), (std::vector<int>{0, 2, 5}));
}

TEST(Topology, PeersAcrossNodesShareTheLocalRank) {
  const std::vector<std::string> keys = {"x", "y", "x", "y", "x", "y"};
  const Topology t = Topology::from_node_keys(keys, 3);  // node 1 (y), local rank 1
  EXPECT_EQ(t.uniform_local_size(), 3);
  EXPECT_EQ(t.peers_across_nodes(), (std::vector<int>{2, 3}));
}

TEST(Topology, SingleNodeAndOneRankPerNode) {
  const Topology one = Topology::single_node(2, 4);
  EXPECT_EQ(one.num_nodes(), 1);
  EXPECT_EQ(one.local_rank(), 2);
  EXPECT_EQ(one.local_size(), 4);
  const Topology spread = Topology::one_rank_per_node(2, 4);
  EXPECT_EQ(spread.num_nodes(), 4);
  EXPECT_EQ(spread.node_rank(), 2);
  EXPECT_EQ(spread.local_rank(), 0);
  EXPECT_EQ(spread.uniform_local_size(), 1);
}

TEST(Topology, SubgroupKeepsItsMembersNodes) {
  const Topology t = Topology::from_node_keys({"a", "a", "b", "b"}, 0);
  const Topology sub = t.restricted_to({3, 1, 2}, 1);  // subgroup ranks 0, 1, 2 = old 3, 1, 2
  EXPECT_EQ(sub.num_nodes(), 2);
  EXPECT_EQ(sub.node_rank(), 1);  // old rank 1 is on node a, which its new rank 0 (old 3) is not
  EXPECT_EQ(sub.local_size(), 1);
  EXPECT_EQ(sub.ranks_of_node(0), (std::vector<int>{0, 2}));
}

TEST(Topology, HostIdentityIsStableAndNodeIdOverridesTheKey) {
  const HostInfo detected = this_host("");
  EXPECT_EQ(detected.node_key, detected.identity);
  EXPECT_EQ(this_host("").identity, detected.identity);
  const HostInfo named = this_host("rack7");
  EXPECT_EQ(named.node_key, "rack7");
  EXPECT_EQ(named.identity, detected.identity);
}

}  // namespace
}  // namespace cohort
