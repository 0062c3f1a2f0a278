// What every reduction reports (BucketStats::reduced_dtype and reduced_bytes) under each hook,
// ZeRO and FSDP; and float32_reduction_hook against the 16-bit reduction at 4 ranks, on
// gradients whose 16-bit partial sums round.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace reduction_dtype_test {

torch::nn::Sequential two_layers() {
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::Tanh(),
                               torch::nn::Linear(16, 4));
}

torch::Tensor inputs(int rank, torch::Dtype dtype) {
  return torch::sin(torch::arange(24, torch::kFloat32).view({3, 8}) * 0.3 * (rank + 1)).to(dtype);
}

size_t parameter_bytes(const torch::nn::Module& module) {
  size_t bytes = 0;
  for (const auto& p : module.parameters()) bytes += p.nbytes();
  return bytes;
}

struct Seen {
  std::vector<BucketStats> buckets;
  size_t parameter_bytes = 0;
};

// One synchronized backward at W=2 of a DDP built with `hook` over a model in `dtype` (a bf16
// model through MasterWeights); rank 0's statistics.
Seen ddp_stats(std::shared_ptr<CommHook> hook, torch::Dtype dtype) {
  Seen seen;
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto net = two_layers();
    std::unique_ptr<amp::MasterWeights> master;
    if (dtype != torch::kFloat32) master = std::make_unique<amp::MasterWeights>(net, dtype);
    DdpOptions options;
    options.comm_hook = hook;
    DistributedDataParallel ddp(net, group, options);
    net->forward(inputs(rank, dtype)).to(torch::kFloat32).pow(2).mean().backward();
    if (rank == 0) seen = {ddp.last_iteration_stats().buckets, parameter_bytes(*net)};
  });
  return seen;
}

// Every bucket reports `dtype`, and its reduced bytes are `ratio` x its gradients' bytes.
void expect_reduced(const Seen& seen, torch::ScalarType dtype, double ratio) {
  ASSERT_FALSE(seen.buckets.empty());
  size_t total = 0;
  for (const auto& b : seen.buckets) {
    EXPECT_EQ(b.reduced_dtype, dtype);
    EXPECT_EQ(static_cast<double>(b.reduced_bytes), ratio * static_cast<double>(b.bytes));
    total += b.bytes;
  }
  EXPECT_EQ(total, seen.parameter_bytes);  // the buckets hold every gradient, once
}

TEST(ReductionStats, DefaultHookReducesTheGradientsOwnDtype) {
  expect_reduced(ddp_stats(nullptr, torch::kFloat32), torch::kFloat32, 1.0);
  expect_reduced(ddp_stats(allreduce_hook(), torch::kBFloat16), torch::kBFloat16, 1.0);
}

TEST(ReductionStats, CompressionHooksSendHalfTheBytesIn16Bit) {
  expect_reduced(ddp_stats(fp16_compress_hook(), torch::kFloat32), torch::kFloat16, 0.5);
  expect_reduced(ddp_stats(bf16_compress_hook(), torch::kFloat32), torch::kBFloat16, 0.5);
}

TEST(ReductionStats, Float32ReductionHookWidens16BitBucketsOnly) {
  expect_reduced(ddp_stats(float32_reduction_hook(), torch::kBFloat16), torch::kFloat32, 2.0);
  expect_reduced(ddp_stats(float32_reduction_hook(), torch::kFloat32), torch::kFloat32, 1.0);
}

TEST(ReductionStats, ZeroReduceScattersReportTheBucket) {
  for (int stage : {1, 2}) {
    std::vector<BucketStats> buckets;
    size_t bytes = 0;
    run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
      auto net = two_layers();
      ZeroOptions options;
      options.stage = stage;
      ZeroDataParallel zero(net, group, options);
      net->forward(inputs(rank, torch::kFloat32)).pow(2).mean().backward();
      if (rank == 0) {
        buckets = zero.last_iteration_stats().buckets;
        bytes = parameter_bytes(*net);
      }
    });
    ASSERT_FALSE(buckets.empty()) << "stage " << stage;
    size_t total = 0;
    for (const auto& b : buckets) {
      EXPECT_EQ(b.reduced_dtype, torch::kFloat32) << "stage " << stage;
      EXPECT_EQ(b.reduced_bytes, b.bytes) << "stage " << stage;
      total += b.reduced_bytes;
    }
    // The buckets are padded to a multiple of the world size: at least every gradient.
    EXPECT_GE(total, bytes) << "stage " << stage;
    EXPECT_LT(total, bytes + buckets.size() * 2 * sizeof(float)) << "stage " << stage;
  }
}

TEST(ReductionStats, FsdpReduceScattersReportTheirReduceDtype) {
  for (bool bf16 : {false, true}) {
    std::vector<BucketStats> units;
    size_t bytes = 0;
    run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
      auto net = two_layers();
      const size_t own = parameter_bytes(*net);
      FsdpOptions options;
      options.strategy = ShardingStrategy::kFullShard;
      if (bf16) options.mixed_precision.reduce_dtype = torch::kBFloat16;
      FullyShardedDataParallel fsdp(net, group, options);
      net->forward(inputs(rank, torch::kFloat32)).pow(2).mean().backward();
      if (rank == 0) {
        units = fsdp.last_iteration_stats().buckets;
        bytes = own;
      }
    });
    ASSERT_FALSE(units.empty());
    size_t total = 0;
    for (const auto& u : units) {
      EXPECT_EQ(u.reduced_dtype, bf16 ? torch::kBFloat16 : torch::kFloat32);
      EXPECT_EQ(u.reduced_bytes, u.bytes);
      total += u.reduced_bytes;
    }
    // Each unit's flat gradient, padded to a multiple of the world size.
    const size_t want = bf16 ? bytes / 2 : bytes;
    EXPECT_GE(total, want) << (bf16 ? "bf16" : "fp32");
    EXPECT_LT(total, want + units.size() * 2 * sizeof(float)) << (bf16 ? "bf16" : "fp32");
  }
}

// ---- float32_reduction_hook against reducing the 16-bit gradients themselves.
//
// At 4 ranks each element's gradients are one large value (1, on rank i % 4) and three small
// ones, 2^-8, 2^-8 and 2^-7 in some order: all exact in bfloat16, and so is their mean
// (1 + 2^-6) / 4. Near 1 bfloat16's numbers are 2^-7 apart, so 1 + 2^-8 is a tie that rounds
// back to 1: a bfloat16 partial sum drops small parts depending on the order the ring adds them
// in. In float32 nothing rounds and the mean is written back exactly.

constexpr int kElements = 1536;

torch::Tensor rank_gradients(int rank) {
  auto i = torch::arange(kElements, torch::kInt64);
  auto position = torch::remainder(rank - i - 1, 4);  // 0..2 among the small ones; 3: the large
  auto k = torch::where(torch::remainder(position + i, 3) == 2, torch::full_like(i, 2),
                        torch::ones_like(i));
  auto small = k.to(torch::kFloat64) * std::ldexp(1.0, -8);
  return torch::where(position == 3, torch::ones({kElements}, torch::kFloat64), small)
      .to(torch::kBFloat16);
}

torch::Tensor reduce_with(const std::shared_ptr<CommHook>& hook, int rank, Group& group) {
  GradBucket bucket;
  bucket.buffer = rank_gradients(rank);
  PendingReduction reduction = hook->start(group, bucket);
  reduction.work->wait();
  if (reduction.finish) reduction.finish();
  return bucket.buffer;
}

TEST(Float32ReductionHook, AveragesBf16GradientsCloserToTheExactMeanThanBf16Reduction) {
  constexpr int kWorld = 4;
  std::vector<torch::Tensor> wide(kWorld), narrow(kWorld);
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    wide[rank] = reduce_with(float32_reduction_hook(), rank, *group);
    narrow[rank] = reduce_with(allreduce_hook(), rank, *group);
  });
  auto exact = torch::zeros({kElements}, torch::kFloat64);
  for (int r = 0; r < kWorld; ++r) exact += rank_gradients(r).to(torch::kFloat64);
  exact /= kWorld;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(wide[r].scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(wide[r], wide[0])) << "rank " << r;
  }
  // The float32 reduction is the exact mean; the bfloat16 one lost small parts somewhere.
  EXPECT_TRUE(torch::equal(wide[0].to(torch::kFloat64), exact));
  const double narrow_error = (narrow[0].to(torch::kFloat64) - exact).abs().max().item<double>();
  EXPECT_GE(narrow_error, std::ldexp(1.0, -9)) << "the bfloat16 reduction did not round";
}

TEST(Float32ReductionHook, ReducesAFloat32BucketInPlaceAsTheDefaultHook) {
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    GradBucket bucket;
    bucket.buffer = torch::full({5}, static_cast<float>(rank + 1));
    PendingReduction reduction = float32_reduction_hook()->start(*group, bucket);
    reduction.work->wait();
    if (reduction.finish) reduction.finish();
    EXPECT_FALSE(reduction.reduced.defined());  // nothing was copied
    EXPECT_TRUE(torch::equal(bucket.buffer, torch::full({5}, 1.5f)));
  });
}

}  // namespace reduction_dtype_test
}  // namespace cohort::testing
