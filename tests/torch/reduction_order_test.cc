// Note [Reduction order] (src/comm/algorithms/algorithms.h): on one host with shared memory
// every reduction sums each element in rank order and divides by the world, whatever bucket,
// shard or unit the element falls in. So DDP's bucket allreduces, ZeRO's reduce-scatter of its
// flat gradients and FSDP's per-unit reduce-scatter give the same gradient bits, and after 30
// AdamW steps the parameters of DDP, ZeRO-1, ZeRO-2, FULL_SHARD and SHARD_GRAD_OP equal, bit
// for bit, one process that sums the ranks' slice gradients in rank order ((g0 + g1) + g2 ...)
// / W, and therefore each other (docs/ddp.md, "Order of reductions"). Ranks are threads over TCP
// with a shared-memory window, as ranks of one host are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "ddp_harness.h"

namespace cohort::testing {
namespace {

// 30 AdamW steps of the harness's MLP at `world` ranks on one host (TCP and shared memory).
ParityCase adamw_case(int world, StrategyKind strategy) {
  ParityCase c;
  c.world = world;
  c.steps = 30;
  c.strategy = strategy;
  c.optimizer = OptimizerKind::kAdamW;
  c.over_tcp = true;
  c.shared_memory = true;
  c.options.bucket_cap_mb = 0.001;  // several buckets, cut elsewhere than the shards
  return c;
}

TEST(ReductionOrder, DdpZeroAndFsdpEqualTheRankOrderSumBitwiseAfter30AdamWSteps) {
  for (int world : {2, 3, 4}) {
    for (StrategyKind strategy : {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2,
                                  StrategyKind::kFullShard, StrategyKind::kShardGradOp}) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " at " + std::to_string(world) +
                   " ranks");
      ParityCase c = adamw_case(world, strategy);
      c.reference_sums_in_rank_order = true;
      c.rtol = 0;
      c.atol = 0;
      expect_parity(c);
    }
  }
}

// The same runs compared with each other directly: each rank's parameters after 30 AdamW steps
// against DDP's rank 0, printed as the table of docs/ddp.md ("Order of reductions").
TEST(ReductionOrder, StrategiesEndBitwiseEqualToDdp) {
  for (int world : {2, 3, 4}) {
    auto run = [&](StrategyKind strategy) { return final_states(adamw_case(world, strategy)); };
    const auto ddp = run(StrategyKind::kDdp);
    for (StrategyKind strategy : {StrategyKind::kZero1, StrategyKind::kZero2,
                                  StrategyKind::kFullShard, StrategyKind::kShardGradOp}) {
      const auto states = run(strategy);
      double worst = 0;
      for (const auto& rank_state : states) {
        for (size_t i = 0; i < rank_state.size(); ++i) {
          worst = std::max(worst, (rank_state[i] - ddp[0][i]).abs().max().item<double>());
        }
      }
      std::printf("W=%d %s: max |difference| from DDP %.3g\n", world, strategy_name(strategy),
                  worst);
      EXPECT_EQ(worst, 0.0) << strategy_name(strategy) << " at " << world << " ranks";
    }
  }
}

}  // namespace
}  // namespace cohort::testing
