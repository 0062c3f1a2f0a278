// The cost model: its file round-trips and bad files are named errors; its predictions pick
// shared memory inside one node, hierarchical across nodes of several ranks, and the flat
// algorithms by size as measured (docs/algorithms.md, "Cost model").
#include "cohort/comm/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include "cohort/core/error.h"

namespace cohort {
namespace {

GroupShape flat(int world) {
  GroupShape shape;
  shape.world = world;
  shape.nodes = world;
  return shape;
}

TEST(CostModel, JsonRoundTrip) {
  CostModel model;
  model.tcp = {12e-6, 1 / 2.5e9};
  model.shm = {0.7e-6, 1 / 14e9};
  model.gamma_s_per_byte = 1 / 7e9;
  const CostModel back = CostModel::from_json(model.to_json(), "test");
  EXPECT_NEAR(back.tcp.alpha_s, model.tcp.alpha_s, 1e-12);
  EXPECT_NEAR(back.tcp.beta_s_per_byte * 1e12, model.tcp.beta_s_per_byte * 1e12, 1e-6);
  EXPECT_NEAR(back.shm.alpha_s, model.shm.alpha_s, 1e-12);
  EXPECT_NEAR(back.gamma_s_per_byte * 1e12, model.gamma_s_per_byte * 1e12, 1e-6);
}

void expect_config_error(const std::string& text, const std::string& fragment) {
  try {
    CostModel::from_json(text, "/etc/model.json");
    FAIL() << "accepted: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/etc/model.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(CostModel, BadFilesAreNamedErrors) {
  expect_config_error("{not json", "invalid JSON");
  expect_config_error(R"({"version": 7})", "version 1");
  std::string json = CostModel::defaults().to_json();
  expect_config_error(json.replace(json.find("\"alpha_us\""), 10, "\"alpha_ux\""), "alpha_us");
  expect_config_error(R"({"version":1,"tcp":{"alpha_us":-1,"gbytes_per_s":1},"shm":{"alpha_us":1,)"
                      R"("gbytes_per_s":1},"reduce":{"gbytes_per_s":1}})",
                      "tcp.alpha_us");
  EXPECT_THROW(CostModel::from_file("/nonexistent/cohort/model.json"), ConfigError);
}

TEST(CostModel, FileNamedByEnvironmentIsRead) {
  const std::string path = ::testing::TempDir() + "cohort_cost_model_test.json";
  CostModel model = CostModel::defaults();
  model.tcp.alpha_s = 99e-6;
  std::ofstream(path) << model.to_json();
  ::setenv("COHORT_COST_MODEL", path.c_str(), 1);
  EXPECT_EQ(CostModel::default_path(), path);
  EXPECT_NEAR(CostModel::load_default().tcp.alpha_s, 99e-6, 1e-12);
  std::ofstream(path) << "garbage";
  EXPECT_THROW(CostModel::load_default(), ConfigError);  // named explicitly: never ignored
  ::unsetenv("COHORT_COST_MODEL");
  std::remove(path.c_str());
}

TEST(CostModel, SharedMemoryWinsInsideOneNode) {
  GroupShape node;
  node.world = 4;
  node.nodes = 1;
  node.local_size = 4;
  node.shared_memory = true;
  for (size_t bytes = 4; bytes <= (size_t{1} << 30); bytes *= 16) {
    EXPECT_EQ(cheapest_allreduce(bytes, node, CostModel::defaults()), Algorithm::kShm) << bytes;
  }
  node.shared_memory = false;
  EXPECT_NE(cheapest_allreduce(1 << 20, node, CostModel::defaults()), Algorithm::kShm);
}

TEST(CostModel, HierarchicalWinsAcrossNodesOfSeveralRanks) {
  CostModel network = CostModel::defaults();
  network.tcp = {50e-6, 1 / 1.25e9};  // 10 Gbit/s between hosts
  GroupShape cluster;
  cluster.world = 8;
  cluster.nodes = 4;
  cluster.local_size = 2;
  cluster.shared_memory = true;
  for (size_t bytes = 1024; bytes <= (size_t{1} << 30); bytes *= 16) {
    EXPECT_EQ(cheapest_allreduce(bytes, cluster, network), Algorithm::kHierarchical) << bytes;
  }
  cluster.local_size = 0;  // uneven nodes
  EXPECT_NE(cheapest_allreduce(1 << 20, cluster, network), Algorithm::kHierarchical);
}

TEST(CostModel, FlatChoiceFollowsSizeAndWorld) {
  const CostModel model = CostModel::defaults();
  // Two ranks: one round of whole buffers while latency dominates, the ring beyond.
  EXPECT_EQ(cheapest_allreduce(4096, flat(2), model), Algorithm::kDirect);
  EXPECT_EQ(cheapest_allreduce(64 << 20, flat(2), model), Algorithm::kRing);
  // A power of two: halving-doubling has fewer latency terms for the same bytes.
  EXPECT_EQ(cheapest_allreduce(4 << 20, flat(8), model), Algorithm::kHalvingDoubling);
  // Predictions grow with the message.
  for (Algorithm a :
       {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree, Algorithm::kDirect}) {
    EXPECT_LT(predict_allreduce(a, 1 << 10, flat(4), model),
              predict_allreduce(a, 1 << 20, flat(4), model));
  }
  EXPECT_EQ(predict_allreduce(Algorithm::kRing, 1 << 20, flat(1), model), 0);
}

// All-gather and reduce-scatter (the planner's collectives): alpha 1 ms, beta 1 us/byte, gamma
// 0.5 us/byte, 4 ranks in one node without shared memory, 4000 bytes.
TEST(CostModel, GatherAndScatterTermsByHand) {
  CostModel model;
  model.tcp = {1e-3, 1e-6};
  model.shm = {1e-6, 1e-9};
  model.gamma_s_per_byte = 0.5e-6;
  GroupShape one_node;
  one_node.world = 4;
  one_node.local_size = 4;
  const auto ag = CollectiveKind::kAllgather, rs = CollectiveKind::kReduceScatter;
  // Ring: 3 steps of a quarter; direct: one round; halving-doubling: log2 4 = 2 rounds.
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kRing, 4000, one_node, model), 0.006, 1e-12);
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kDirect, 4000, one_node, model), 0.004,
              1e-12);
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kHalvingDoubling, 4000, one_node, model),
              0.005, 1e-12);
  // A reduce-scatter also reduces the 3000 bytes it receives.
  EXPECT_NEAR(predict_gather_or_scatter(rs, Algorithm::kRing, 4000, one_node, model), 0.0075,
              1e-12);
  // Shared memory runs only in one node that has it.
  EXPECT_TRUE(std::isinf(predict_gather_or_scatter(ag, Algorithm::kShm, 4000, one_node, model)));
  one_node.shared_memory = true;
  // One round each way (ceil(4000 / 256 KiB) = 1), the piece in and the whole buffer out.
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kShm, 4000, one_node, model),
              2e-6 + 1.25 * 4000 * 1e-9, 1e-15);
  // The automatic choice: shared memory in one node; 4 flat ranks at 4000 bytes: direct.
  EXPECT_NEAR(predict_automatic(ag, 4000, one_node, model), 2e-6 + 1.25 * 4000 * 1e-9, 1e-15);
  EXPECT_NEAR(predict_automatic(ag, 4000, flat(4), model), 0.004, 1e-12);
  EXPECT_NEAR(predict_automatic(CollectiveKind::kAllreduce, 4000, flat(4), model),
              predict_allreduce(cheapest_allreduce(4000, flat(4), model), 4000, flat(4), model),
              1e-15);
}

// Between nodes, the busiest node's link: what each algorithm sends across, round by round
// (Note [Gather and scatter across nodes]).
TEST(CostModel, GatherAndScatterAcrossNodesByHand) {
  CostModel model;
  model.tcp = {1e-3, 1e-6};
  model.gamma_s_per_byte = 0.5e-6;
  GroupShape two_by_two;  // ranks 0, 1 on node 0; 2, 3 on node 1; blocks of 1000 bytes
  two_by_two.world = 4;
  two_by_two.nodes = 2;
  two_by_two.local_size = 2;
  two_by_two.shared_memory = true;
  const auto ag = CollectiveKind::kAllgather, rs = CollectiveKind::kReduceScatter;
  // Ring: 3 steps, one block across per node each.
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kRing, 4000, two_by_two, model), 0.006,
              1e-12);
  // Direct: each node's 2 ranks send a block to each of the other node's 2 at once: 4 blocks.
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kDirect, 4000, two_by_two, model), 0.005,
              1e-12);
  // Bruck: at distance 1 one rank per node sends its block across (0 to 3, 2 to 1); at distance
  // 2 both send two blocks across: 5 blocks in 2 rounds.
  EXPECT_NEAR(predict_gather_or_scatter(ag, Algorithm::kHalvingDoubling, 4000, two_by_two, model),
              0.007, 1e-12);
  // Halving: at distance 2 every rank sends half its input (2000) across, at distance 1 inside
  // the node: 4000 bytes in 2 rounds, and the 3000 bytes received reduced.
  EXPECT_NEAR(predict_gather_or_scatter(rs, Algorithm::kHalvingDoubling, 4000, two_by_two, model),
              0.0075, 1e-12);
  // Three nodes of one rank: the fold (rank 0's whole 3000 bytes to rank 1), one halving step of
  // 1500 from each of ranks 1 and 2, the unfold (1000 back to rank 0): 5500 bytes, 3 rounds.
  GroupShape three_nodes;
  three_nodes.world = three_nodes.nodes = 3;
  three_nodes.local_size = 1;
  EXPECT_NEAR(predict_gather_or_scatter(rs, Algorithm::kHalvingDoubling, 3000, three_nodes, model),
              0.003 + 0.0055 + 0.001, 1e-12);
}

}  // namespace
}  // namespace cohort
