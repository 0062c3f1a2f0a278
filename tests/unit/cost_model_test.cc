// The cost model: its file round-trips and bad files are named errors; its predictions pick
// shared memory inside one node, hierarchical across nodes of several ranks, and the flat
// algorithms by size as measured (docs/algorithms.md, "Cost model").
#include "choice/cost_model.h"

#include <gtest/gtest.h>

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
  expect_config_error(
      R"({"version":1,"tcp":{"alpha_us":-1,"gbytes_per_s":1},"shm":{"alpha_us":1,)"
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
  for (Algorithm a : {Algorithm::kRing, Algorithm::kHalvingDoubling, Algorithm::kTree,
                      Algorithm::kDirect}) {
    EXPECT_LT(predict_allreduce(a, 1 << 10, flat(4), model),
              predict_allreduce(a, 1 << 20, flat(4), model));
  }
  EXPECT_EQ(predict_allreduce(Algorithm::kRing, 1 << 20, flat(1), model), 0);
}

}  // namespace
}  // namespace cohort
