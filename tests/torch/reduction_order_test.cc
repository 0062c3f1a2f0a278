// Note [Reduction order] (src/comm/algorithms/algorithms.h): on one host with shared memory
// every reduction sums each element in rank order and divides by the world, whatever bucket,
// shard or unit the element falls in. So DDP's bucket allreduces, ZeRO's reduce-scatter of its
// flat gradients and FSDP's per-unit reduce-scatter give the same gradient bits, and after 30
// AdamW steps the parameters of DDP, ZeRO-1, ZeRO-2, FULL_SHARD and SHARD_GRAD_OP equal, bit
// for bit, one process that sums the ranks' slice gradients in rank order ((g0 + g1) + g2 ...)
// / W, and therefore each other (docs/ddp.md, "Order of reductions"). Ranks are threads over TCP
// with a shared-memory window, as ranks of one host are.
#include <gtest/gtest.h>

#include "ddp_harness.h"

namespace cohort::testing {
namespace {

TEST(ReductionOrder, DdpZeroAndFsdpEqualTheRankOrderSumBitwiseAfter30AdamWSteps) {
  for (int world : {2, 3, 4}) {
    for (Strategy strategy : {Strategy::kDdp, Strategy::kZero1, Strategy::kZero2,
                              Strategy::kFullShard, Strategy::kShardGradOp}) {
      SCOPED_TRACE(std::string(strategy_name(strategy)) + " at " + std::to_string(world) +
                   " ranks");
      ParityCase c;
      c.world = world;
      c.steps = 30;
      c.strategy = strategy;
      c.optimizer = OptimizerKind::kAdamW;
      c.over_tcp = true;
      c.shared_memory = true;
      c.reference_sums_in_rank_order = true;
      c.rtol = 0;
      c.atol = 0;
      c.options.bucket_cap_mb = 0.001;  // several buckets, cut elsewhere than the shards
      expect_parity(c);
    }
  }
}

}  // namespace
}  // namespace cohort::testing
