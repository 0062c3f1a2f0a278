// DistributedDataParallel against one process on the whole global batch, parameters compared
// after every step (tolerance: |ddp - reference| <= 1e-6 + 1e-5 |reference| in float32, unless
// a case says otherwise).
#include <gtest/gtest.h>

#include "ddp_harness.h"

namespace cohort::testing {
namespace ddp_parity_test {

TEST(DdpParity, MlpAtEveryWorldSize) {
  for (int world : {1, 2, 3, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ParityCase c;
    c.world = world;
    expect_parity(c);
  }
}

TEST(DdpParity, BucketCapsFromOneParameterPerBucketToOneBucket) {
  for (double cap : {0.0, 0.001, 1000.0}) {
    SCOPED_TRACE("bucket_cap_mb " + std::to_string(cap));
    ParityCase c;
    c.world = 3;
    c.options.bucket_cap_mb = cap;
    c.options.first_bucket_cap_mb = cap;
    expect_parity(c);
  }
}

TEST(DdpParity, ConvWithBatchNormKeepsRankZeroBuffers) {
  for (int world : {1, 2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ParityCase c;
    c.world = world;
    c.make_model = conv_batchnorm();
    c.image_inputs = true;
    c.reference_per_slice = true;  // BatchNorm normalizes each rank's slice on its own
    expect_parity(c);
  }
}

TEST(DdpParity, GradientsCopiedInsteadOfBucketViews) {
  ParityCase c;
  c.world = 2;
  c.options.gradient_as_bucket_view = false;
  expect_parity(c);
}

TEST(DdpParity, NoRebuildOfBuckets) {
  ParityCase c;
  c.world = 2;
  c.options.rebuild_buckets = false;
  c.options.bucket_cap_mb = 0;
  c.make_model = reordered();
  expect_parity(c);
}

TEST(DdpParity, OverTcp) {
  ParityCase c;
  c.world = 3;
  c.over_tcp = true;
  expect_parity(c);
}

// The buckets are registered memory (DdpOptions::registered_buckets): reduced in place (two
// ranks in one pass over both buffers, more in blocks).
TEST(DdpParity, OverSharedMemory) {
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ParityCase c;
    c.world = world;
    c.over_tcp = true;
    c.shared_memory = true;
    c.options.bucket_cap_mb = 0.01;  // several buckets in flight
    expect_parity(c);
  }
}

// The same with private buckets: staged through the shared-memory window.
TEST(DdpParity, OverSharedMemoryWithPrivateBuckets) {
  ParityCase c;
  c.world = 3;
  c.over_tcp = true;
  c.shared_memory = true;
  c.options.bucket_cap_mb = 0.01;
  c.options.registered_buckets = false;
  expect_parity(c);
}

TEST(DdpParity, NoSyncAccumulationMatchesOneLargerBatch) {
  for (int micro_batches : {2, 4}) {
    SCOPED_TRACE("micro-batches " + std::to_string(micro_batches));
    ParityCase c;
    c.world = 2;
    c.micro_batches = micro_batches;
    c.steps = 10;
    expect_parity(c);
  }
}

TEST(DdpParity, UnusedBranchOnSomeIterationsAndRanks) {
  // The branch is skipped on every rank at some steps (the first among them: its gradients
  // must stay undefined, not become zeros, or momentum and weight decay would move it) and by
  // some ranks at others.
  auto use = [](int step, int rank) { return step % 3 != 0 && (step + rank) % 4 != 1; };
  for (int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ParityCase c;
    c.world = world;
    c.make_model = branchy(use);
    c.reference_per_slice = true;
    c.options.find_unused_parameters = true;
    expect_parity(c);
  }
}

TEST(DdpParity, BranchNeverUsedWithStaticGraph) {
  ParityCase c;
  c.world = 2;
  c.make_model = branchy([](int, int) { return false; });
  c.options.static_graph = true;
  c.options.bucket_cap_mb = 0;
  expect_parity(c);
}

TEST(DdpParity, Float16CompressionHook) {
  ParityCase c;
  c.world = 2;
  c.options.comm_hook = fp16_compress_hook();
  c.rtol = 1e-2;  // gradients rounded to 11 significant bits before the reduction
  c.atol = 1e-3;
  expect_parity(c);
}

TEST(DdpParity, BFloat16CompressionHook) {
  ParityCase c;
  c.world = 2;
  c.options.comm_hook = bf16_compress_hook();
  c.rtol = 5e-2;  // 8 significant bits
  c.atol = 1e-2;
  expect_parity(c);
}

TEST(DdpParity, UnevenInputsWithJoin) {
  // Rank 0 has every batch; the others have 1, 3 and 0 fewer.
  const int fewer[] = {0, 1, 3, 0};
  ParityCase c;
  c.world = 4;
  c.steps = 8;
  c.steps_of_rank = [&](int rank) { return 8 - fewer[rank]; };
  expect_parity(c);
}

// join() stands in for the trainers' gradient allreduces from another call site: the call
// check (Note [Call stamps]) must see the same calls there over TCP and shared memory.
TEST(DdpParity, UnevenInputsWithJoinOverTcpAndSharedMemory) {
  const int fewer[] = {0, 2, 5};
  for (bool shared_memory : {false, true}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "tcp");
    ParityCase c;
    c.world = 3;
    c.steps = 8;
    c.steps_of_rank = [&](int rank) { return 8 - fewer[rank]; };
    c.over_tcp = true;
    c.shared_memory = shared_memory;
    expect_parity(c);
  }
}

}  // namespace ddp_parity_test
}  // namespace cohort::testing
