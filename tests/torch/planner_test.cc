// The planner (docs/planner.md): its step-time arithmetic against cases worked by hand, its
// memory formulas, the chooser's decisions on synthetic machines, its errors, and the inputs it
// takes from a module (ModelSpec::of, ComputeProfile::measure).
#include "cohort/torch/plan/planner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>

#include "cohort/core/error.h"
#include "ddp_harness.h"

namespace cohort {
namespace {

constexpr int64_t kMiB = 1024 * 1024;
constexpr int64_t kFloatsPerMiB = kMiB / 4;

// `count` float32 parameters of 1 MiB, each its own FSDP unit; Adam.
ModelSpec mebibyte_parameters(int count) {
  ModelSpec model;
  for (int i = 0; i < count; ++i) {
    model.parameters.push_back({"p" + std::to_string(i), kFloatsPerMiB, 4, i});
    model.units.push_back("u" + std::to_string(i));
  }
  return model;
}

// The message of the InvalidArgument `call` threw; a test failure and "" where it threw none.
template <typename Call>
std::string invalid_argument_of(Call&& call) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument was thrown";
  return "";
}

ModelSpec four_mebibytes() {
  return mebibyte_parameters(4);
}

ComputeProfile profile(double forward_ms, double backward_ms, double optimizer_ms) {
  ComputeProfile compute;
  compute.forward_s = forward_ms * 1e-3;
  compute.backward_s = backward_ms * 1e-3;
  compute.optimizer_s = optimizer_ms * 1e-3;
  return compute;
}

// `world` ranks on one node over TCP (no shared memory): 10 ns per byte (100 MB/s), no
// latency, free reductions.
MachineSpec slow_loopback(int world) {
  MachineSpec machine;
  machine.shape.world = world;
  machine.shape.nodes = 1;
  machine.shape.local_size = world;
  machine.links.tcp = {0, 1e-8};
  machine.links.shm = {0, 1e-9};
  machine.links.gamma_s_per_byte = 0;
  return machine;
}

PlanConfig ddp(double cap_mb) {
  PlanConfig config;
  config.bucket_cap_mb = cap_mb;
  return config;
}

// A 1 MiB allreduce at 2 ranks is a ring of one MiB each way per rank: 10.48576 ms.
constexpr double kAllreduceMs = 10.48576;

TEST(PlannerModel, DdpWithOneBucketPerParameterOverlapsBackward) {
  // Gradients ready at 1/4, 1/2, 3/4 and all of backward (reverse order, by size): at 20, 30, 40
  // and 50 ms. Each allreduce waits for its bucket and for the one before it.
  const Prediction p = predict(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), ddp(1));
  const double last_end = 20 + 4 * kAllreduceMs;  // each starts as the one before ends
  EXPECT_NEAR(p.communication_s * 1e3, 4 * kAllreduceMs, 1e-9);
  EXPECT_NEAR(p.compute_s * 1e3, 55, 1e-9);
  EXPECT_NEAR(p.step_s * 1e3, last_end + 5, 1e-9);  // the optimizer steps after the last
  EXPECT_NEAR(p.exposed_s * 1e3, last_end + 5 - 55, 1e-9);
  EXPECT_EQ(p.network_bytes, 4 * kMiB);  // 2 (n-1)/n of each bucket
  EXPECT_EQ(p.shm_bytes, 0);
}

TEST(PlannerModel, DdpWithALargeBucketWaitsForTheWholeBackward) {
  // The first bucket closes at 1 MiB (the last parameter); the other three share one bucket,
  // ready at the end of backward (50 ms), and take 3 allreduce times.
  const Prediction p = predict(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), ddp(25));
  EXPECT_NEAR(p.step_s * 1e3, 50 + 3 * kAllreduceMs + 5, 1e-9);
}

TEST(PlannerModel, FullShardPrefetchesAndReduceScattersUnitByUnit) {
  // Two units of 1 MiB at 2 ranks: an all-gather or reduce-scatter is one direct round of half
  // the buffer, 5.24288 ms. Worked by hand: forward 0-5.24 gather 0, 5.24-10.24 unit 0 while
  // unit 1 is gathered (to 10.49), 10.49-15.49 unit 1; backward starts on unit 1, still
  // gathered, 15.49-25.49, while unit 0 is gathered again (to 20.73), then reduce-scatters
  // unit 1 (to 30.73); 25.49-35.49 unit 0, and its reduce-scatter ends at 40.73.
  const ModelSpec model = mebibyte_parameters(2);  // two units of 1 MiB
  PlanConfig config;
  config.strategy = StrategyKind::kFullShard;
  const Prediction p = predict(model, profile(10, 20, 0), slow_loopback(2), config);
  EXPECT_NEAR(p.step_s * 1e3, 40.72864, 1e-9);
  EXPECT_NEAR(p.exposed_s * 1e3, 10.72864, 1e-9);
  EXPECT_NEAR(p.communication_s * 1e3, 5 * 5.24288, 1e-9);  // 3 gathers, 2 reduce-scatters
}

TEST(PlannerModel, ShardGradOpGathersOnlyInForward) {
  const ModelSpec model = mebibyte_parameters(2);  // two units of 1 MiB
  PlanConfig config;
  config.strategy = StrategyKind::kShardGradOp;
  const Prediction p = predict(model, profile(10, 20, 0), slow_loopback(2), config);
  // Forward as FULL_SHARD (to 15.49); backward 15.49-25.49 unit 1, its reduce-scatter to 30.73;
  // 25.49-35.49 unit 0, its reduce-scatter to 40.73.
  EXPECT_NEAR(p.step_s * 1e3, 15.48576 + 20 + 5.24288, 1e-9);
  EXPECT_NEAR(p.communication_s * 1e3, 4 * 5.24288, 1e-9);
}

// A unit's forward and backward are its share of backward as the gradients' ready times
// measured it, not its share of the parameters: u0 holds 1 MiB whose gradient comes at the end
// of backward, after 90% of it (a convolution), u1 4 MiB ready at 10% (a large linear layer).
TEST(PlannerModel, AUnitComputesItsShareOfBackwardAsMeasured) {
  ModelSpec model;
  model.parameters.push_back({"conv", kFloatsPerMiB, 4, 0});
  model.parameters.push_back({"linear", 4 * kFloatsPerMiB, 4, 1});
  model.units = {"u0", "u1"};
  ComputeProfile compute = profile(20, 40, 0);
  compute.gradient_ready = {1.0, 0.1};
  PlanConfig config = ddp(25);
  config.strategy = StrategyKind::kFullShard;
  // Forward: u0's gather (1 MiB at 2 ranks: 5.24288 ms), then u0 computes 18 ms while u1's
  // gather (20.97152 ms) runs, u1 waits for it to 26.2144 and computes 2 ms. Backward: u1 4 ms
  // while u0 is gathered again (to 33.45728), u1's reduce-scatter after that (to 54.4288), u0
  // 36 ms from 33.45728, its reduce-scatter to 74.70016.
  EXPECT_NEAR(predict(model, compute, slow_loopback(2), config).step_s * 1e3, 74.70016, 1e-6);
  // Unmeasured, by their parameters (0.2 and 0.8): u0 4 ms, u1 16 ms from 26.2144, in backward
  // 32 ms from 42.2144 and its reduce-scatter to 95.18592, u0 8 ms and its to 100.4288.
  compute.gradient_ready.clear();
  EXPECT_NEAR(predict(model, compute, slow_loopback(2), config).step_s * 1e3, 100.4288, 1e-6);
}

TEST(PlannerModel, FullShardWithoutPrefetchGathersEachUnitWhenNeeded) {
  // The case above without prefetch: forward 0-5.24 gather 0, 5.24-10.24 unit 0, 10.24-15.49
  // gather 1, 15.49-20.49 unit 1; backward 20.49-30.49 unit 1 (still gathered), whose
  // reduce-scatter (30.49-35.73) goes before unit 0's gather (35.73-40.97); 40.97-50.97 unit 0,
  // its reduce-scatter ends at 56.21. One gathered unit fewer: 1 MiB less memory.
  const ModelSpec model = mebibyte_parameters(2);
  PlanConfig config;
  config.strategy = StrategyKind::kFullShard;
  config.fsdp_prefetch = false;
  const Prediction p = predict(model, profile(10, 20, 0), slow_loopback(2), config);
  EXPECT_NEAR(p.step_s * 1e3, 30 + 5 * 5.24288, 1e-9);
  EXPECT_NEAR(p.communication_s * 1e3, 5 * 5.24288, 1e-9);
  config.fsdp_prefetch = true;
  const Prediction prefetching = predict(model, profile(10, 20, 0), slow_loopback(2), config);
  EXPECT_EQ(prefetching.peak_memory_bytes - p.peak_memory_bytes, kMiB);
  EXPECT_EQ(p.config.describe(), "full_shard, no prefetch, float32");
}

// Four 1 MiB units, and the same model as one unit (cut at 4 MiB): on a link where every
// collective costs 50 ms, the one unit's gather and reduce-scatter beat the four units' eleven
// collectives. predict() re-cuts the model for the layout a configuration names.
TEST(PlannerModel, UnitLayoutsAreCandidatesAndPredictRecutsTheModel) {
  ModelSpec model = four_mebibytes();
  model.other_unit_layouts.push_back({4 * kFloatsPerMiB, {""}, {0, 0, 0, 0}});
  MachineSpec latency = slow_loopback(2);
  latency.links.tcp = {50e-3, 0};
  PlannerOptions options;
  options.strategies = {StrategyKind::kFullShard};
  const Plan plan = cohort::plan(model, profile(10, 40, 0), latency, options);
  ASSERT_EQ(plan.candidates.size(), 4u) << plan.table();  // 2 layouts x prefetch or not
  EXPECT_EQ(plan.chosen.config.min_unit_parameters, 4 * kFloatsPerMiB) << plan.table();
  EXPECT_EQ(plan.chosen.config.describe(), "full_shard, units of 1048576+ parameters, float32");
  EXPECT_NEAR(plan.chosen.step_s * 1e3, 50 + 10 + 40 + 50, 1e-9);  // gather, compute, scatter
  PlanConfig one_unit = plan.chosen.config;
  EXPECT_EQ(predict(model, profile(10, 40, 0), latency, one_unit).step_s, plan.chosen.step_s);
  EXPECT_EQ(predict(model.with_units(4 * kFloatsPerMiB), profile(10, 40, 0), latency, {}).step_s,
            predict(model, profile(10, 40, 0), latency, ddp(25)).step_s)
      << "DDP does not depend on the units";
  ModelSpec mislaid = model;  // a layout made by hand that names too few parameters' units
  mislaid.other_unit_layouts[0].unit_of.pop_back();
  const std::string too_few =
      invalid_argument_of([&] { predict(mislaid, profile(10, 40, 0), latency, one_unit); });
  EXPECT_NE(too_few.find("names 3 parameters' units; the model has 4"), std::string::npos)
      << too_few;
  one_unit.min_unit_parameters = 12345;  // a layout the model does not hold
  const std::string not_held =
      invalid_argument_of([&] { predict(model, profile(10, 40, 0), latency, one_unit); });
  EXPECT_NE(not_held.find("no unit layout cut at 12345 parameters"), std::string::npos) << not_held;
  options.search_fsdp_units = false;
  const Plan own = cohort::plan(model, profile(10, 40, 0), latency, options);
  ASSERT_EQ(own.candidates.size(), 1u) << own.table();
  EXPECT_TRUE(own.chosen.config.fsdp_prefetch);
}

TEST(PlannerModel, FsdpComputeTakesTheShardedRatio) {
  // The case above with FSDP's own compute making forward and backward 1.5x: 15 and 30 ms. Each
  // forward unit now outlasts the prefetch: 5.24-12.74 unit 0, 12.74-20.24 unit 1; backward
  // 20.24-35.24 unit 1, 35.24-50.24 unit 0, whose reduce-scatter ends at 55.49. DDP and ZeRO,
  // which do not intercept operators, keep their compute.
  const ModelSpec model = mebibyte_parameters(2);
  ComputeProfile compute = profile(10, 20, 0);
  compute.sharded_compute_ratio = 1.5;
  PlanConfig config;
  config.strategy = StrategyKind::kFullShard;
  const Prediction p = predict(model, compute, slow_loopback(2), config);
  EXPECT_NEAR(p.compute_s * 1e3, 45, 1e-9);
  EXPECT_NEAR(p.step_s * 1e3, 5.24288 + 45 + 5.24288, 1e-9);
  EXPECT_NEAR(predict(model, compute, slow_loopback(2), ddp(25)).compute_s * 1e3, 30, 1e-9);
}

TEST(PlannerModel, HybridShardAveragesOverTheNodesAfterBackward) {
  // Two units of 1 MiB on 2 nodes x 2 ranks. Inside a node a gather or reduce-scatter through
  // shared memory takes 1.5 MiB at 1 ns per byte: 1.572864 ms; across the nodes each unit's
  // allreduce (a ring of 2) 10.48576 ms. Forward: gather unit 0, 10 ms of compute (the prefetch
  // of unit 1 hidden); backward: 20 ms (unit 0's gather and unit 1's reduce-scatter hidden),
  // unit 0's reduce-scatter; then, at the end of backward, the two allreduces one after the
  // other, which backward did not hide.
  MachineSpec two_by_two = slow_loopback(4);
  two_by_two.shape.nodes = 2;
  two_by_two.shape.local_size = 2;
  two_by_two.shape.shared_memory = true;
  PlanConfig config;
  config.strategy = StrategyKind::kHybridShard;
  const Prediction p = predict(mebibyte_parameters(2), profile(10, 20, 0), two_by_two, config);
  EXPECT_NEAR(p.step_s * 1e3, 2 * 1.572864 + 30 + 2 * kAllreduceMs, 1e-9);
}

TEST(PlannerModel, LocalSgdAveragesTheParametersOncePerPeriod) {
  // No communication in backward; every 4 steps one 4 MiB allreduce (2 x 4 MiB ring at 2 ranks:
  // 4 x 10.48576 ms) after the step: a quarter of it per step on average.
  PlanConfig config;
  config.local_sgd_period = 4;
  const Prediction p = predict(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), config);
  EXPECT_NEAR(p.compute_s * 1e3, 55, 1e-9);
  EXPECT_NEAR(p.exposed_s * 1e3, kAllreduceMs, 1e-9);
  EXPECT_NEAR(p.step_s * 1e3, 55 + kAllreduceMs, 1e-9);
  EXPECT_EQ(p.network_bytes, kMiB);  // 4 MiB every 4 steps
  EXPECT_TRUE(p.reduction_s.empty());
  // Parameters, gradients, Adam's 8 MiB of state, and the flat copy of the parameters it
  // averages through after the step.
  EXPECT_EQ(p.peak_memory_bytes, 20 * kMiB);
  config.strategy = StrategyKind::kZero1;
  EXPECT_THROW(predict(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), config),
               InvalidArgument);
}

// A 512 x 512 weight, a 4 x 4 one and a bias of 512, in one bucket (ready at the end of
// backward, 50 ms), under PowerSGD at rank 2 with 3 ms of arithmetic measured. The weight sends
// P (512 x 2) in round 1 and Q (512 x 2) in round 2; the 4 x 4 one would gain too little
// (16 < 2 x 2 x (4 + 4)) and goes whole with the bias in round 1: 1,552 floats, then 1,024.
ModelSpec a_layer_with_a_small_matrix() {
  ModelSpec model;
  model.parameters = {{"w", 512 * 512, 4, 0, 512}, {"s", 16, 4, 0, 4}, {"b", 512, 4, 0, 1}};
  model.units = {""};
  return model;
}

TEST(PlannerModel, PowerSgdSendsPThenQAroundItsArithmetic) {
  ComputeProfile compute = profile(10, 40, 5);
  compute.powersgd = {{2, 3e-3}};
  PlanConfig config = ddp(25);
  config.first_bucket_cap_mb = 25;
  config.powersgd_rank = 2;
  const ModelSpec model = a_layer_with_a_small_matrix();
  const Prediction p = predict(model, compute, slow_loopback(2), config);
  const double round1_ms = 1552 * 4 * 1e-5, round2_ms = 1024 * 4 * 1e-5;  // 10 ns a byte
  // Round 1 at 50 ms; the arithmetic 50-53; round 2 at 53; then the optimizer.
  EXPECT_NEAR(p.compute_s * 1e3, 10 + 40 + 3 + 5, 1e-9);
  EXPECT_NEAR(p.exposed_s * 1e3, round2_ms, 1e-9);
  EXPECT_NEAR(p.step_s * 1e3, 58 + round2_ms, 1e-9);
  EXPECT_NEAR(p.communication_s * 1e3, round1_ms + round2_ms, 1e-9);
  ASSERT_EQ(p.reduction_s.size(), 1u);
  EXPECT_NEAR(p.reduction_s[0] * 1e3, round1_ms + round2_ms, 1e-9);
  EXPECT_EQ(p.network_bytes, (1552 + 1024) * 4);
  // DDP's parameters, gradients and Adam's state (16 bytes an element), the residual (4) and Q
  // (1,024 floats) that stay, and the compensated gradients (4), made in backward beside the
  // activations.
  const int64_t parameter_bytes = model.parameter_bytes();
  EXPECT_EQ(p.peak_memory_bytes, 6 * parameter_bytes + 1024 * 4);
  compute.activation_bytes = 2 * parameter_bytes;
  EXPECT_EQ(predict(model, compute, slow_loopback(2), config).peak_memory_bytes,
            8 * parameter_bytes + 1024 * 4);
  EXPECT_EQ(p.config.describe(), "ddp, 25 MiB buckets (first 25), powersgd rank 2");
  config.powersgd_rank = 4;  // not measured
  EXPECT_THROW(predict(model, compute, slow_loopback(2), config), InvalidArgument);
  config.powersgd_rank = 2;
  config.strategy = StrategyKind::kZero1;  // a DDP hook
  EXPECT_THROW(predict(model, compute, slow_loopback(2), config), InvalidArgument);
}

TEST(PlannerModel, BfloatGradientsHalveTheBytes) {
  PlanConfig bf16 = ddp(1);
  bf16.reduce_dtype = torch::kBFloat16;
  const auto machine = slow_loopback(2);
  const Prediction p = predict(four_mebibytes(), profile(10, 40, 5), machine, bf16);
  EXPECT_EQ(p.network_bytes, 2 * kMiB);
  EXPECT_NEAR(p.communication_s * 1e3, 2 * kAllreduceMs, 1e-9);
}

TEST(PlannerModel, MemoryPerStrategyWithAdamAtTwoRanks) {
  ModelSpec model = four_mebibytes();  // 4 MiB of parameters: 16 MiB of state under DDP
  model.zero_grad_keeps_gradients = false;
  ComputeProfile compute = profile(10, 40, 5);
  compute.activation_bytes = 3 * kMiB;
  const auto machine = slow_loopback(2);
  auto memory = [&](StrategyKind strategy, double cap_mb = 1) {
    PlanConfig config = ddp(cap_mb);
    config.strategy = strategy;
    return predict(model, compute, machine, config).peak_memory_bytes / kMiB;
  };
  EXPECT_EQ(memory(StrategyKind::kDdp), 4 + 4 + 8 + 3);
  EXPECT_EQ(memory(StrategyKind::kZero1), 4 + 4 + 4 + 3);
  // Two 1 MiB buckets in flight and the reduced blocks (half the gradients).
  EXPECT_EQ(memory(StrategyKind::kZero2), 4 + 2 * 1 + 2 + 4 + 3);
  // Buckets of 1, 2 and 1 MiB (the first capped at 1): the two largest are 3 MiB.
  EXPECT_EQ(memory(StrategyKind::kZero2, 2), 4 + (2 + 1) + 2 + 4 + 3);
  // Where zero_grad() zeroes the gradients instead of dropping them (libtorch 1.x), ZeRO's
  // shards keep theirs, half the gradients, from step to step; DDP's stay in the buckets.
  model.zero_grad_keeps_gradients = true;
  EXPECT_EQ(memory(StrategyKind::kDdp), 4 + 4 + 8 + 3);
  EXPECT_EQ(memory(StrategyKind::kZero1), 4 + 4 + 2 + 4 + 3);
  EXPECT_EQ(memory(StrategyKind::kZero2), 4 + 2 * 1 + 2 + 2 + 4 + 3);
  model.zero_grad_keeps_gradients = false;
  // (4 + 4 + 8) / 2, two gathered units and three units' gradients.
  EXPECT_EQ(memory(StrategyKind::kFullShard), 8 + 2 + 3 + 3);
  EXPECT_EQ(memory(StrategyKind::kShardGradOp), 8 + 4 + 3 + 3);  // the whole model gathered
}

// FSDP holds, when a unit's gradients arrive, those and the two units before it in reduce order
// (reverse, the root last) still in flight; HYBRID_SHARD also keeps half (1/L) of each unit
// reduced before them, to average it across the nodes at the end of backward.
TEST(PlannerModel, FsdpHoldsThreeUnitsGradientsInReduceOrderAndHybridShardItsBlocks) {
  ModelSpec model = mebibyte_parameters(4);
  model.zero_grad_keeps_gradients = false;
  ComputeProfile compute = profile(10, 40, 5);
  compute.activation_bytes = 3 * kMiB;
  PlanConfig config;
  config.strategy = StrategyKind::kFullShard;
  // Units of 4, 1, 1 and 4 MiB: reduced 4, 1, 1, 4; at most 4 + 1 + 1 at once, not the three
  // largest (9). (10 + 10 + 20) / 2, the two largest units gathered, 6, and the activations.
  model.parameters[0].elements = model.parameters[3].elements = 4 * kFloatsPerMiB;
  EXPECT_EQ(predict(model, compute, slow_loopback(2), config).peak_memory_bytes,
            (20 + 8 + 6 + 3) * kMiB);
  // Four 1 MiB units on 2 nodes x 2: when u0's arrive, u0..u2 in flight and u3's block (half of
  // it) kept. (4 + 4 + 8) / 2, the two largest units gathered, 3.5, and the activations.
  model = mebibyte_parameters(4);
  MachineSpec two_by_two = slow_loopback(4);
  two_by_two.shape.nodes = 2;
  two_by_two.shape.local_size = 2;
  two_by_two.shape.shared_memory = true;
  config.strategy = StrategyKind::kHybridShard;
  EXPECT_EQ(predict(model, compute, two_by_two, config).peak_memory_bytes,
            8 * kMiB + 2 * kMiB + 3 * kMiB + kMiB / 2 + 3 * kMiB);
}

// Over master weights (ModelSpec::master_weights: a bfloat16 model, float32 masters) DDP holds
// the 16-bit model and its 16-bit gradients beside the masters and the state, and sends 16-bit
// gradients; FSDP keeps float32 shards and gathers 16-bit units.
TEST(PlannerModel, MasterWeightsHoldASixteenBitModelBesideFloat32Masters) {
  ModelSpec model = four_mebibytes();  // 4 MiB of float32 parameters, Adam: 8 MiB of state
  model.zero_grad_keeps_gradients = false;
  ComputeProfile compute = profile(10, 40, 5);
  compute.activation_bytes = 3 * kMiB;
  const auto machine = slow_loopback(2);
  auto predicted = [&](StrategyKind strategy) {
    PlanConfig config = ddp(1);
    config.strategy = strategy;
    return predict(model, compute, machine, config);
  };
  const Prediction float32_ddp = predicted(StrategyKind::kDdp);
  model.master_weights = torch::kBFloat16;
  const Prediction ddp16 = predicted(StrategyKind::kDdp);
  EXPECT_EQ(ddp16.peak_memory_bytes, (2 + 2 + 4 + 8 + 3) * kMiB);
  EXPECT_EQ(ddp16.network_bytes, float32_ddp.network_bytes / 2);
  EXPECT_GT(ddp16.network_bytes, 0);
  // (4 + 4 + 8) / 2 in shards, two gathered units and three units' gradients, each 0.5 MiB.
  EXPECT_EQ(predicted(StrategyKind::kFullShard).peak_memory_bytes,
            8 * kMiB + kMiB + 3 * kMiB / 2 + 3 * kMiB);
  EXPECT_EQ(predicted(StrategyKind::kShardGradOp).peak_memory_bytes,
            8 * kMiB + 2 * kMiB + 3 * kMiB / 2 + 3 * kMiB);
  const std::string what = invalid_argument_of([&] { predicted(StrategyKind::kZero1); });
  EXPECT_NE(what.find("not ZeRO"), std::string::npos) << what;
}

TEST(PlannerChoice, OverMasterWeightsNeitherZeroNorAnotherReductionIsACandidate) {
  ModelSpec model = four_mebibytes();
  model.master_weights = torch::kBFloat16;
  PlannerOptions options;
  options.reduce_dtypes = {torch::kFloat32, torch::kBFloat16};
  options.local_sgd_periods = {2};
  options.powersgd_ranks = {2};  // not measured: evaluating it would throw
  const Plan plan = cohort::plan(model, profile(10, 40, 5), slow_loopback(2), options);
  ASSERT_FALSE(plan.candidates.empty());
  for (const Prediction& p : plan.candidates) {
    EXPECT_TRUE(p.config.strategy != StrategyKind::kZero1 &&
                p.config.strategy != StrategyKind::kZero2 &&
                p.config.reduce_dtype == torch::kFloat32 && p.config.local_sgd_period == 0 &&
                p.config.powersgd_rank == 0)
        << p.config.describe();
  }
}

TEST(PlannerChoice, SmallBucketsWinWhereBackwardCanHideThem) {
  PlannerOptions options;
  options.strategies = {StrategyKind::kDdp};
  options.bucket_caps_mb = {1, 25};
  const Plan plan = cohort::plan(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), options);
  EXPECT_EQ(plan.chosen.config.bucket_cap_mb, 1);
  ASSERT_EQ(plan.candidates.size(), 2u);
  EXPECT_LT(plan.candidates[0].step_s, plan.candidates[1].step_s);
  EXPECT_NE(plan.table().find("<- chosen"), std::string::npos) << plan.table();
}

// The baseline (a run's defaults) is kept unless the fastest is predicted faster by more than
// min_gain: 1 MiB buckets take 66.9 ms (20 ms + 4 allreduces + 5), 25 MiB 86.5 ms (50 ms + 3
// allreduces + 5): 22.6% less.
TEST(PlannerChoice, TheBaselineIsKeptUnlessBeatenByTheMinimumGain) {
  PlannerOptions options;
  options.strategies = {StrategyKind::kDdp};
  options.bucket_caps_mb = {1, 25};
  const auto chosen_cap = [&](double min_gain) {
    options.min_gain = min_gain;
    return cohort::plan(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), options)
        .chosen.config.bucket_cap_mb;
  };
  EXPECT_EQ(chosen_cap(0.5), 1) << "no baseline: the fastest";
  options.baseline = ddp(25);
  EXPECT_EQ(chosen_cap(0.3), 25);
  EXPECT_EQ(chosen_cap(0.2), 1);
  options.baseline = ddp(8);  // not a candidate
  EXPECT_EQ(chosen_cap(0.3), 1);
  // A baseline that does not fit is not kept: DDP needs 16 MiB, ZeRO-1 12.
  options.baseline = ddp(25);
  options.strategies = {StrategyKind::kDdp, StrategyKind::kZero1};
  options.memory_budget_bytes = 14 * kMiB;
  options.min_gain = 0.99;
  const Plan plan = cohort::plan(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), options);
  EXPECT_EQ(plan.chosen.config.strategy, StrategyKind::kZero1) << plan.table();
}

// Without an optimizer step to share, the sharded strategies only add collectives.
TEST(PlannerChoice, DdpsFirstBucketIsSizedToo) {
  // Eight 1 MiB parameters, backward 80 ms, 25 MiB buckets. A first bucket of 1 MiB is ready
  // at 20 ms but leaves 7 MiB for the end of backward: 90 + 7 allreduces = 163.4 ms. One of
  // 4 MiB is ready at 50 ms (its allreduce ends at 91.9), and the other 4 MiB follow it at 91.9:
  // 133.9 ms.
  PlannerOptions options;
  options.strategies = {StrategyKind::kDdp};
  options.bucket_caps_mb = {25};
  options.first_bucket_caps_mb = {1, 4};
  const Plan plan =
      cohort::plan(mebibyte_parameters(8), profile(10, 80, 0), slow_loopback(2), options);
  ASSERT_EQ(plan.candidates.size(), 2u);
  EXPECT_EQ(plan.chosen.config.first_bucket_cap_mb, 4) << plan.table();
  EXPECT_NEAR(plan.chosen.step_s * 1e3, 50 + 8 * kAllreduceMs, 1e-9);
  EXPECT_NEAR(plan.candidates[1].step_s * 1e3, 90 + 7 * kAllreduceMs, 1e-9);
}

TEST(PlannerChoice, FastSharedMemoryKeepsDdp) {
  MachineSpec machine = slow_loopback(2);
  machine.shape.shared_memory = true;
  machine.links = CostModel::defaults();
  const Plan plan = cohort::plan(four_mebibytes(), profile(10, 40, 0), machine);
  EXPECT_EQ(plan.chosen.config.strategy, StrategyKind::kDdp) << plan.table();
}

TEST(PlannerChoice, ASlowLinkTakesBfloatGradientsWhereAllowed) {
  MachineSpec machine;  // 2 hosts x 1 rank at 100 Mbit/s
  machine.shape.world = machine.shape.nodes = 2;
  machine.links.tcp = {100e-6, 8.0 / 100e6};
  PlannerOptions options;
  options.reduce_dtypes = {torch::kFloat32, torch::kBFloat16};
  const Plan plan = cohort::plan(four_mebibytes(), profile(10, 40, 5), machine, options);
  EXPECT_EQ(plan.chosen.config.reduce_dtype, torch::kBFloat16) << plan.table();
}

TEST(PlannerChoice, ASlowLinkTakesTheLongestLocalSgdPeriodWhereAllowed) {
  MachineSpec machine;  // 2 hosts x 1 rank at 100 Mbit/s: a 4 MiB allreduce takes about 0.34 s
  machine.shape.world = machine.shape.nodes = 2;
  machine.links.tcp = {100e-6, 8.0 / 100e6};
  PlannerOptions options;
  const Plan plain = cohort::plan(four_mebibytes(), profile(10, 40, 5), machine, options);
  EXPECT_EQ(plain.chosen.config.local_sgd_period, 0) << "local SGD changes training: not unasked";
  options.local_sgd_periods = {2, 8, 4};
  const Plan plan = cohort::plan(four_mebibytes(), profile(10, 40, 5), machine, options);
  EXPECT_EQ(plan.chosen.config.local_sgd_period, 8) << plan.table();
  EXPECT_EQ(plan.chosen.config.describe(), "ddp, local SGD every 8 steps, float32");
  EXPECT_LT(plan.chosen.step_s, plain.chosen.step_s);
}

// Four 512 x 512 weights (1 MiB each): at rank 2 PowerSGD sends 2,048 floats for each.
TEST(PlannerChoice, PowerSgdOnlyWhereAllowedAndWhereItsArithmeticCostsLessThanTheLink) {
  ModelSpec model = four_mebibytes();
  for (auto& p : model.parameters) p.rows = 512;
  ComputeProfile compute = profile(10, 40, 5);
  compute.powersgd = {{2, 8e-3}};
  MachineSpec slow;  // 2 hosts x 1 rank at 100 Mbit/s: a 4 MiB allreduce takes about 0.34 s
  slow.shape.world = slow.shape.nodes = 2;
  slow.links.tcp = {100e-6, 8.0 / 100e6};
  PlannerOptions options;
  EXPECT_EQ(cohort::plan(model, compute, slow, options).chosen.config.powersgd_rank, 0)
      << "PowerSGD changes training: not unasked";
  options.powersgd_ranks = {2};
  const Plan plan = cohort::plan(model, compute, slow, options);
  EXPECT_EQ(plan.chosen.config.powersgd_rank, 2) << plan.table();
  EXPECT_EQ(plan.chosen.config.strategy, StrategyKind::kDdp);
  EXPECT_LE(plan.chosen.network_bytes, 4 * 2048 * 4 * 2);  // P and Q of each, on 2 hosts
  MachineSpec fast = slow;  // the same ranks on one node over shared memory
  fast.shape.nodes = 1;
  fast.shape.local_size = 2;
  fast.shape.shared_memory = true;
  fast.links = CostModel::defaults();
  const Plan on_one_node = cohort::plan(model, compute, fast, options);
  EXPECT_EQ(on_one_node.chosen.config.powersgd_rank, 0) << on_one_node.table();
  options.powersgd_ranks = {2, 4};  // rank 4 was not measured
  EXPECT_THROW(cohort::plan(model, compute, slow, options), InvalidArgument);
}

// 16 MiB of parameters at 2 ranks under a budget: DDP needs 64 MiB, ZeRO-1 48, ZeRO-2 42 (1 MiB
// buckets), SHARD_GRAD_OP 51, FULL_SHARD 32 + 2 gathered units + 3 units' gradients = 37.
Plan plan_sixteen_mebibytes(int64_t budget_mib, PlannerOptions options = {}) {
  options.memory_budget_bytes = budget_mib * kMiB;
  return cohort::plan(mebibyte_parameters(16), profile(10, 40, 5), slow_loopback(2), options);
}

TEST(PlannerChoice, ATinyBudgetTakesTheOnlyStrategyThatFits) {
  const Plan plan = plan_sixteen_mebibytes(40);
  EXPECT_EQ(plan.chosen.config.strategy, StrategyKind::kFullShard) << plan.table();
  EXPECT_TRUE(plan.chosen.fits);
}

TEST(PlannerChoice, ABudgetOneUnitShortOfFullShardTakesItWithoutPrefetch) {
  // FULL_SHARD needs 37 MiB with prefetch, 36 without (one 1 MiB unit gathered fewer).
  const Plan plan = plan_sixteen_mebibytes(36);
  EXPECT_EQ(plan.chosen.config.strategy, StrategyKind::kFullShard) << plan.table();
  EXPECT_FALSE(plan.chosen.config.fsdp_prefetch) << plan.table();
  EXPECT_EQ(plan.chosen.peak_memory_bytes, 36 * kMiB);
  PlannerOptions own_units;
  own_units.search_fsdp_units = false;
  EXPECT_THROW(plan_sixteen_mebibytes(36, own_units), InvalidArgument);
  own_units.fsdp_prefetch = false;  // as the run says (--fsdp-no-prefetch)
  const Plan without = plan_sixteen_mebibytes(36, own_units);
  EXPECT_FALSE(without.chosen.config.fsdp_prefetch) << without.table();
  EXPECT_EQ(without.chosen.peak_memory_bytes, 36 * kMiB);
}

TEST(PlannerChoice, NothingFittingIsANamedError) {
  PlannerOptions options;
  options.memory_budget_bytes = 4 * kMiB;
  const std::string what = invalid_argument_of(
      [&] { cohort::plan(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), options); });
  EXPECT_NE(what.find("no configuration fits the memory budget of 4.0 MiB"), std::string::npos)
      << what;
  EXPECT_NE(what.find("needs 12.0 MiB"), std::string::npos) << what;  // ZeRO's 4 + 4 + 8 / 2
}

TEST(PlannerChoice, HybridShardNeedsSeveralEqualNodes) {
  PlanConfig config;
  config.strategy = StrategyKind::kHybridShard;
  EXPECT_THROW(predict(four_mebibytes(), profile(10, 40, 5), slow_loopback(2), config),
               InvalidArgument);
  MachineSpec two_by_two = slow_loopback(4);
  two_by_two.shape.nodes = 2;
  two_by_two.shape.local_size = 2;
  two_by_two.shape.shared_memory = true;
  const Prediction p = predict(four_mebibytes(), profile(10, 40, 5), two_by_two, config);
  EXPECT_GT(p.network_bytes, 0);  // the shards' allreduce across the nodes
  EXPECT_GT(p.shm_bytes, 0);      // the units' collectives inside each node
}

TEST(PlannerInputs, ModelSpecTakesFsdpUnitsAndTrainableParameters) {
  torch::nn::Sequential net(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(16, 4));
  net[2]->as<torch::nn::Linear>()->bias.set_requires_grad(false);
  const ModelSpec spec = ModelSpec::of(*net, kAdamStateBytes);
  ASSERT_EQ(spec.parameters.size(), 3u);  // the frozen bias is left out
  EXPECT_EQ(spec.elements(), 8 * 16 + 16 + 16 * 4);
  EXPECT_EQ(spec.parameter_bytes(), 4 * spec.elements());
  EXPECT_NE(spec.parameters[0].unit, spec.parameters[2].unit) << "each Linear is a unit";
  EXPECT_EQ(spec.parameters[0].rows, 16);  // a Linear's weight is out x in
  EXPECT_EQ(spec.parameters[1].rows, 1);   // a bias has one row
}

// Two Linear layers outside any container: the root unit alone by default; cut at 1,000
// parameters the 64x32 layer (2,080) is a unit of its own and the 32x4 one (132) stays in the
// root, listed after it (units go in the order of their first parameters). A threshold that cuts
// as another does adds nothing.
TEST(PlannerInputs, ModelSpecHoldsTheOtherUnitLayoutsThatCutDifferently) {
  struct TwoLayers : torch::nn::Module {
    TwoLayers() {
      register_module("wide", torch::nn::Linear(64, 32));
      register_module("narrow", torch::nn::Linear(32, 4));
    }
  };
  TwoLayers net;
  const ModelSpec spec = ModelSpec::of(net, kAdamStateBytes, 0, {0, 1000, 2000, 100000});
  EXPECT_EQ(spec.units, std::vector<std::string>{""});
  ASSERT_EQ(spec.other_unit_layouts.size(), 1u) << "1000 and 2000 cut alike; 0 is the spec's own";
  EXPECT_EQ(spec.unit_layout_thresholds(), (std::vector<int64_t>{0, 1000}));
  const ModelSpec cut = spec.with_units(1000);
  EXPECT_EQ(cut.units, (std::vector<std::string>{"wide", ""}));
  ASSERT_EQ(cut.parameters.size(), 4u);
  EXPECT_EQ(cut.parameters[0].unit, 0);  // wide.weight
  EXPECT_EQ(cut.parameters[3].unit, 1);  // narrow.bias
  EXPECT_EQ(cut.with_units(0).units, spec.units) << "the spec's own layout stays reachable";
  EXPECT_EQ(ModelSpec::unit_thresholds(net),
            (std::vector<int64_t>{0, 1106, 553, 276, 138, 69}));  // 2,212 elements
}

TEST(PlannerInputs, MeasuredProfileSeesBackwardInReverse) {
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(64, 256), torch::nn::Tanh(),
                            torch::nn::Linear(256, 256), torch::nn::Tanh(),
                            torch::nn::Linear(256, 8));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  const auto inputs = torch::randn({128, 64});
  const ComputeProfile p = ComputeProfile::measure(*net, [&] {
    sgd.zero_grad();
    net->forward(inputs).pow(2).mean().backward();
    sgd.step();
  });
  EXPECT_GT(p.forward_s, 0);
  EXPECT_GT(p.backward_s, 0);
  ASSERT_EQ(p.gradient_ready.size(), 6u);
  for (double f : p.gradient_ready) {
    EXPECT_GE(f, 0);
    EXPECT_LE(f, 1);
  }
  // The last layer's gradients are computed first, the first layer's last.
  EXPECT_LT(p.gradient_ready[5], p.gradient_ready[0]);
}

TEST(PlannerInputs, ShardedRatioIsTheShardedStepOverThePlainOne) {
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(256, 512), torch::nn::Tanh(),
                            torch::nn::Linear(512, 8));
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01));
  const auto inputs = torch::randn({256, 256});
  const auto step = [&] {
    sgd.zero_grad();
    net->forward(inputs).pow(2).mean().backward();
    sgd.step();
  };
  ComputeProfile p;
  EXPECT_THROW(p.measure_sharded(step), InvalidArgument);  // no plain step measured yet
  // A "sharded" step that computes forward and backward three times: (3 (f + b) + o - o) /
  // (f + b) = 3, give or take the machine's noise (wide bounds: a loaded machine's medians of
  // 9 steps; a wrong formula gives 1 or a ratio of seconds). The plain and the sharded step are
  // timed apart, so a burst of load on one of them (ctest runs other tests beside this one: 1.2
  // once) can move the ratio out of the bounds; three tries, where a wrong formula fails all.
  for (int attempt = 0; attempt < 3; ++attempt) {
    p = ComputeProfile::measure(*net, step, 9);
    p.measure_sharded(
        [&] {
          sgd.zero_grad();
          for (int i = 0; i < 3; ++i) net->forward(inputs).pow(2).mean().backward();
          sgd.step();
        },
        9);
    if (p.sharded_compute_ratio > 1.5 && p.sharded_compute_ratio < 6.0) break;
  }
  EXPECT_GT(p.sharded_compute_ratio, 1.5);
  EXPECT_LT(p.sharded_compute_ratio, 6.0);
  p.measure_sharded([] {});  // faster than the plain step: no less than 1
  EXPECT_EQ(p.sharded_compute_ratio, 1.0);
}

// Steps that spin for a fixed time: the PowerSGD one 3 ms longer than the plain one.
TEST(PlannerInputs, PowerSgdCostIsTheHookedStepOverThePlainOne) {
  const auto spin = [](double ms) {
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  ComputeProfile p;
  EXPECT_THROW(p.powersgd_s(2), InvalidArgument);
  p.measure_powersgd(
      2, [&] { spin(1); }, [&] { spin(4); }, 7);
  EXPECT_GT(p.powersgd_s(2), 2.9e-3);
  EXPECT_LT(p.powersgd_s(2), 10e-3);  // a wrong sign or a ratio is far outside
  p.measure_powersgd(
      2, [&] { spin(4); }, [&] { spin(1); }, 1);  // faster: no less than 0
  ASSERT_EQ(p.powersgd.size(), 1u) << "measured again, the rank's cost is replaced";
  EXPECT_EQ(p.powersgd_s(2), 0.0);
  EXPECT_THROW(p.measure_powersgd(
                   0, [] {}, [] {}),
               InvalidArgument);
}

// agree() gives every rank the slowest rank's times, the mean ready fractions and the largest
// activations, and refuses profiles of different parameter counts or whose PowerSGD costs are
// for different ranks (they are matched by position).
TEST(PlannerInputs, AgreeTakesTheSlowestRanksTimesAndRefusesDifferentPowerSgdRanks) {
  testing::run_with_groups(2, [](int rank, std::shared_ptr<Group> group) {
    ComputeProfile compute = profile(10 + 10 * rank, 40, 5);
    compute.activation_bytes = (1 + 2 * rank) * kMiB;
    compute.gradient_ready = {1.0, 0.5 * rank};
    compute.powersgd = {{2, 1e-3 * (1 + rank)}};
    compute.agree(*group);
    EXPECT_NEAR(compute.forward_s, 20e-3, 1e-12);
    EXPECT_NEAR(compute.backward_s, 40e-3, 1e-12);
    EXPECT_EQ(compute.activation_bytes, 3 * kMiB);
    EXPECT_EQ(compute.gradient_ready, (std::vector<double>{1.0, 0.25}));
    EXPECT_NEAR(compute.powersgd_s(2), 2e-3, 1e-12);
    ComputeProfile uneven = profile(10, 40, 5);
    uneven.gradient_ready.assign(static_cast<size_t>(1 + rank), 1.0);  // 1 parameter here, 2 there
    EXPECT_THROW(uneven.agree(*group), InvalidArgument);
    ComputeProfile other = profile(10, 40, 5);
    other.powersgd = {{2 + 2 * rank, 1e-3}};  // rank 2 here, rank 4 there
    EXPECT_THROW(other.agree(*group), InvalidArgument);
  });
}

TEST(PlannerInputs, PlanInputRoundTripsAndNamesWhatIsWrong) {
  PlanInput job{four_mebibytes(), profile(10, 40, 5)};
  job.compute.gradient_ready = {1.0, 0.75, 0.5, 0.25};
  job.compute.activation_bytes = 12345;
  job.compute.sharded_compute_ratio = 1.25;
  const PlanInput back = PlanInput::from_json(job.to_json(), "job.json");
  ASSERT_EQ(back.model.parameters.size(), 4u);
  EXPECT_EQ(back.model.parameters[3].name, "p3");
  EXPECT_EQ(back.model.parameters[3].unit, 3);
  EXPECT_EQ(back.model.units, job.model.units);
  EXPECT_EQ(back.compute.gradient_ready, job.compute.gradient_ready);
  EXPECT_EQ(back.compute.activation_bytes, 12345);
  EXPECT_NEAR(back.compute.backward_s, 0.040, 1e-12);
  EXPECT_EQ(back.compute.sharded_compute_ratio, 1.25);
  EXPECT_TRUE(back.model.other_unit_layouts.empty());
  EXPECT_TRUE(back.compute.powersgd.empty());
  EXPECT_EQ(back.model.zero_grad_keeps_gradients, kZeroGradKeepsGradients);
  job.model.zero_grad_keeps_gradients = !kZeroGradKeepsGradients;
  EXPECT_EQ(PlanInput::from_json(job.to_json(), "job.json").model.zero_grad_keeps_gradients,
            !kZeroGradKeepsGradients);
  job.model.zero_grad_keeps_gradients = kZeroGradKeepsGradients;
  EXPECT_FALSE(back.model.master_weights.has_value());
  job.model.master_weights = torch::kBFloat16;
  EXPECT_EQ(PlanInput::from_json(job.to_json(), "job.json").model.master_weights,
            std::optional<torch::Dtype>(torch::kBFloat16));
  std::string float64_masters = job.to_json();
  float64_masters.replace(float64_masters.find("\"bfloat16\""), 10, "\"float64\"");
  job.model.master_weights.reset();
  PlanInput compressed{a_layer_with_a_small_matrix(), profile(10, 40, 5)};
  compressed.compute.powersgd = {{2, 3e-3}, {4, 5e-3}};
  const PlanInput compressed_back = PlanInput::from_json(compressed.to_json(), "job.json");
  EXPECT_EQ(compressed_back.model.parameters[1].rows, 4);
  ASSERT_EQ(compressed_back.compute.powersgd.size(), 2u);
  EXPECT_EQ(compressed_back.compute.powersgd[1].rank, 4);
  EXPECT_NEAR(compressed_back.compute.powersgd_s(4), 5e-3, 1e-12);
  const auto machine = slow_loopback(2);
  EXPECT_EQ(predict(back.model, back.compute, machine, ddp(1)).step_s,
            predict(job.model, job.compute, machine, ddp(1)).step_s);
  auto refused = [](const std::string& text, const std::string& words) {
    const std::string what = invalid_argument_of([&] { PlanInput::from_json(text, "job.json"); });
    EXPECT_NE(what.find(words), std::string::npos) << what << "\nfor " << text;
  };
  refused("{", "job.json: not a plan input (invalid JSON");
  refused(R"({"version": 2})", "not a version 1 plan input");
  refused(float64_masters, "job.json: 'master_weights' must be \"bfloat16\" or \"float16\"");
  std::string no_compute = job.to_json();
  no_compute.replace(no_compute.find("\"compute\""), 9, "\"computed\"");
  refused(no_compute, "job.json: the plan input has no 'compute'");
  // `input`'s JSON with its first `from` written as `to`.
  const auto edited = [](const PlanInput& input, const std::string& from, const std::string& to) {
    std::string text = input.to_json();
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  refused(edited(job, "\"unit\": 3", "\"unit\": 9"),
          "parameter 'p3' has a negative size, no bytes per element, a unit out of "
          "range or fewer than 1 row");
  refused(edited(compressed, "\"rows\": 4", "\"rows\": 0"), "parameter 's' has a negative size");
  refused(edited(compressed, "\"rank\": 4", "\"rank\": 0"),
          "job.json: a powersgd cost needs a rank >= 1 and ms >= 0");
  PlanInput layouts = job;
  layouts.model.min_unit_parameters = 7;
  layouts.model.other_unit_layouts.push_back({99, {"", "u"}, {0, 1, 1, 0}});
  const PlanInput layouts_back = PlanInput::from_json(layouts.to_json(), "job.json");
  EXPECT_EQ(layouts_back.model.min_unit_parameters, 7);
  ASSERT_EQ(layouts_back.model.other_unit_layouts.size(), 1u);
  EXPECT_EQ(layouts_back.model.with_units(99).parameters[2].unit, 1);
  std::string short_layout = layouts.to_json();
  short_layout.replace(short_layout.find("\"unit_of\""), 9, "\"unit_of\": [0],\"x\"");
  refused(short_layout, "the unit layout cut at 99 gives 1 parameters' units for 4 parameters");
  std::string outside = layouts.to_json();
  outside.replace(outside.find("\"unit_of\""), 9, "\"unit_of\": [0, 1, 2, 0],\"x\"");
  refused(outside, "the unit layout cut at 99 has a unit out of range");
  std::string faster_sharded = job.to_json();
  faster_sharded.replace(faster_sharded.find("1.25"), 4, "0.50");
  refused(faster_sharded, "job.json: sharded_compute_ratio must be at least 1");
}

// Online correction: a run whose compute took twice the profile's and whose reductions took
// 1.5x the prediction refits both, and the refit predicts what was measured.
TEST(PlannerRefit, ScalesComputeAndLinksByWhatWasMeasured) {
  const ModelSpec model = four_mebibytes();
  const ComputeProfile compute = profile(10, 40, 5);
  const MachineSpec machine = slow_loopback(2);
  const Prediction predicted = predict(model, compute, machine, ddp(1));
  ASSERT_EQ(predicted.reduction_s.size(), 4u);  // one per bucket
  EXPECT_NEAR(predicted.reduction_s[0] * 1e3, kAllreduceMs, 1e-9);
  StepMeasurement measured;
  measured.compute_s = 2 * predicted.compute_s;
  for (double s : predicted.reduction_s) measured.reduction_s.push_back(1.5 * s);
  const Refit r = refit(compute, machine, predicted, measured);
  EXPECT_NEAR(r.compute_ratio, 2, 1e-12);
  EXPECT_NEAR(r.link_ratio, 1.5, 1e-12);
  EXPECT_TRUE(r.off);
  const Prediction again = predict(model, r.compute, r.machine, ddp(1));
  EXPECT_NEAR(again.compute_s, measured.compute_s, 1e-12);
  for (size_t i = 0; i < again.reduction_s.size(); ++i) {
    EXPECT_NEAR(again.reduction_s[i], measured.reduction_s[i], 1e-12);
  }
  // Within the threshold: nothing to plan again.
  measured.compute_s = 1.1 * predicted.compute_s;
  measured.reduction_s = predicted.reduction_s;
  EXPECT_FALSE(refit(compute, machine, predicted, measured).off);
}

TEST(PlannerInputs, StrategyNamesRoundTripAndAnUnknownOneIsNone) {
  for (auto strategy :
       {StrategyKind::kDdp, StrategyKind::kZero1, StrategyKind::kZero2, StrategyKind::kFullShard,
        StrategyKind::kShardGradOp, StrategyKind::kHybridShard}) {
    EXPECT_EQ(strategy_named(strategy_name(strategy)), strategy);
  }
  EXPECT_EQ(strategy_named("zero3"), std::nullopt);
}

}  // namespace
}  // namespace cohort
