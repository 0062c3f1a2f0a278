// The quantizing and sparsifying hooks (sparsification.h, quantization.h): bit packing; Top-K
// and Random-K with k = n equal to a plain allreduce; Top-K choosing the k largest magnitudes;
// Random-K's shared indices and its n / k scaling; QSGD and TernGrad unbiased (and a biased
// stand-in caught by the same bound) with draws differing per rank; the sign hook's values;
// error feedback losing nothing, step by step; DDP ranks staying bitwise identical with the
// payload sizes reported; empty buckets; bad options and buckets refused naming the hook (and
// the bucket). Thread ranks over the in-process group; no test draws from torch's global
// generator.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/compress/quantization.h"
#include "cohort/torch/compress/sparsification.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "compress/bit_packing.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace compression_hooks_test {

GradBucket bucket_of(const torch::Tensor& values, size_t index = 0, int64_t iteration = 0) {
  GradBucket bucket;
  bucket.index = index;
  bucket.iteration = iteration;
  bucket.buffer = values.clone();
  bucket.gradients = {bucket.buffer};
  return bucket;
}

// Runs a hook on one bucket to the end, as DDP does; returns what it reported.
PendingReduction reduce(CommHook& hook, Group& group, GradBucket& bucket) {
  PendingReduction reduction = hook.start(group, bucket);
  reduction.work->wait();
  if (reduction.finish) reduction.finish();
  return reduction;
}

// Small multiples of 1/4: sums of a few are exact in any order, so the average of a ring
// allreduce and that of a decode in rank order are the same floats.
torch::Tensor exact_gradient(int rank, int step, int64_t n) {
  auto i = torch::arange(n, torch::kFloat32);
  return (torch::remainder(i * (7 + 2 * rank) + 3 * step, 17) - 8) * 0.25;
}

// Varied magnitudes, different per rank and step.
torch::Tensor gradient(int rank, int step, int64_t n) {
  auto i = torch::arange(n, torch::kFloat32);
  return torch::sin(i * 0.37 * (rank + 1) + step * 0.11) * (1.5 + torch::cos(i * 0.05 + rank));
}

// ---- bit packing

TEST(CompressionBitPacking, RoundTripsEveryWidthAndCount) {
  for (int bits : {1, 2, 4}) {
    for (int64_t count : {0, 1, 3, 7, 8, 9, 33, 1000}) {
      SCOPED_TRACE(std::to_string(bits) + " bits, " + std::to_string(count) + " codes");
      auto codes = torch::remainder(torch::arange(count) * 5 + count, 1 << bits).to(torch::kUInt8);
      auto packed = pack_codes(codes, bits);
      EXPECT_EQ(packed.scalar_type(), torch::kUInt8);
      EXPECT_EQ(packed.numel(), packed_size(count, bits));
      EXPECT_EQ(packed.numel(), (count * bits + 7) / 8);
      EXPECT_TRUE(torch::equal(unpack_codes(packed, count, bits), codes));
    }
  }
}

TEST(CompressionBitPacking, LowestCodeInTheLowestBits) {
  auto codes = torch::tensor({1, 2, 3, 0, 1}, torch::kUInt8);
  auto packed = pack_codes(codes, 2);
  ASSERT_EQ(packed.numel(), 2);
  EXPECT_EQ(packed[0].item<uint8_t>(), 1 | 2 << 2 | 3 << 4);
  EXPECT_EQ(packed[1].item<uint8_t>(), 1);  // padded with zero codes
  auto bits = torch::tensor({1, 0, 0, 0, 0, 0, 0, 1, 1}, torch::kUInt8);
  auto packed_bits = pack_codes(bits, 1);
  ASSERT_EQ(packed_bits.numel(), 2);
  EXPECT_EQ(packed_bits[0].item<uint8_t>(), 0x81);
  EXPECT_EQ(packed_bits[1].item<uint8_t>(), 0x01);
}

TEST(CompressionHooks, SparseCountIsTheCeilingAndAtLeastOne) {
  EXPECT_EQ(sparse_count(0.01, 1000), 10);
  EXPECT_EQ(sparse_count(0.07, 100), 7);  // 0.07 * 100 is 7.000000000000001 in double
  EXPECT_EQ(sparse_count(0.5, 3), 2);
  EXPECT_EQ(sparse_count(0.001, 10), 1);
  EXPECT_EQ(sparse_count(1.0, 77), 77);
  EXPECT_EQ(sparse_count(0.3, 0), 0);
}

// ---- exactness

TEST(CompressionHooks, TopKAndRandomKWithKEqualToNMatchAPlainAllreduce) {
  const int64_t n = 37;
  for (int world : {1, 2, 3}) {
    for (bool feedback : {true, false}) {
      SCOPED_TRACE("world " + std::to_string(world) + (feedback ? ", error feedback" : ""));
      run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
        auto plain = allreduce_hook();
        auto top = top_k_hook({1.0, feedback});
        auto random = random_k_hook({1.0, /*seed=*/5, feedback});
        for (int step = 0; step < 3; ++step) {  // later steps: the residual stays zero
          auto want = bucket_of(exact_gradient(rank, step, n), 0, step);
          reduce(*plain, *group, want);
          for (CommHook* hook : std::vector<CommHook*>{top.get(), random.get()}) {
            auto got = bucket_of(exact_gradient(rank, step, n), 0, step);
            reduce(*hook, *group, got);
            EXPECT_TRUE(torch::equal(got.buffer, want.buffer))
                << hook->name() << ", rank " << rank << ", step " << step << ": "
                << (got.buffer - want.buffer).abs().max().item<float>();
          }
        }
      });
    }
  }
}

TEST(CompressionHooks, TopKSendsExactlyTheKLargestMagnitudes) {
  const int64_t n = 200;
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    // Distinct magnitudes 1..n in a shuffled order, signs alternating.
    auto generator = at::make_generator<at::CPUGeneratorImpl>(11);
    auto magnitudes = torch::randperm(n, generator, torch::kLong).to(torch::kFloat32) + 1;
    auto signs = 1 - 2 * torch::remainder(torch::arange(n), 2).to(torch::kFloat32);
    auto g = magnitudes * signs;
    for (double ratio : {0.01, 0.1, 0.33}) {
      const int64_t k = sparse_count(ratio, n);
      SCOPED_TRACE("ratio " + std::to_string(ratio) + ", k " + std::to_string(k));
      auto hook = top_k_hook({ratio, /*error_feedback=*/false});
      auto bucket = bucket_of(g);
      const PendingReduction reduction = reduce(*hook, *group, bucket);
      EXPECT_EQ(reduction.wire_bytes, static_cast<size_t>(8 * k));
      // At W = 1 the bucket is what was sent: nonzero exactly at the indices sent.
      auto sent_at = std::get<0>(torch::sort(bucket.buffer.nonzero().view({-1})));
      auto want_at = std::get<0>(torch::sort(
          std::get<1>(torch::sort(g.abs(), /*dim=*/0, /*descending=*/true)).narrow(0, 0, k)));
      EXPECT_TRUE(torch::equal(sent_at, want_at)) << sent_at << want_at;
      EXPECT_TRUE(torch::equal(bucket.buffer.index_select(0, want_at), g.index_select(0, want_at)));
    }
  });
}

// Random-K's indices are the same on every rank and change with the iteration. With error
// feedback the values go out as they are (the residual keeps the rest); without, scaled by
// n / k so that the estimate is unbiased.
TEST(CompressionHooks, RandomKDrawsSharedIndicesAndScalesOnlyWithoutFeedback) {
  const int64_t n = 100;
  const double ratio = 0.1;  // k = 10: n / k = 10
  for (bool feedback : {true, false}) {
    SCOPED_TRACE(feedback ? "error feedback" : "no error feedback");
    std::vector<std::vector<torch::Tensor>> chosen(2);  // [rank][iteration]
    run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
      for (int64_t iteration : {0, 1}) {
        auto hook = random_k_hook({ratio, /*seed=*/7, feedback});  // no residual yet
        // The same gradient on both ranks: the average is each rank's own values.
        const auto g = gradient(0, 0, n) + 10;  // no zeros: every chosen index is nonzero
        auto bucket = bucket_of(g, 0, iteration);
        reduce(*hook, *group, bucket);
        auto at = bucket.buffer.nonzero().view({-1});
        ASSERT_EQ(at.numel(), 10);
        const auto want = g.index_select(0, at) * (feedback ? 1.0 : 10.0);
        EXPECT_TRUE(torch::allclose(bucket.buffer.index_select(0, at), want, 1e-6, 0))
            << "rank " << rank << ", iteration " << iteration;
        chosen[rank].push_back(at);
      }
    });
    EXPECT_TRUE(torch::equal(chosen[0][0], chosen[1][0]));
    EXPECT_TRUE(torch::equal(chosen[0][1], chosen[1][1]));
    EXPECT_FALSE(torch::equal(chosen[0][0], chosen[0][1])) << "the same indices at every step";
  }
}

// ---- unbiasedness

// The decoded vectors of `draws` reductions of `c` at W = 1, one per iteration (fixed seed).
using Decoder = std::function<torch::Tensor(const torch::Tensor& c, int64_t iteration)>;

Decoder decoded_by(std::shared_ptr<CommHook> hook, Group& group) {
  return [hook, &group](const torch::Tensor& c, int64_t iteration) {
    auto bucket = bucket_of(c, 0, iteration);
    reduce(*hook, group, bucket);
    return bucket.buffer;
  };
}

// The largest |mean of the draws - c| in standard errors, where `sd` bounds the standard
// deviation of one draw (per element). With the true mean c, each element's mean over N draws
// is nearly normal (N = 400) with a standard deviation at most sd / sqrt(N): beyond 5 of those
// happens with probability below 6e-7 per element, so below 1e-4 for the 64 elements. A biased
// encoder is off by a fixed amount that does not shrink with N.
double worst_error_in_standard_errors(const Decoder& decode, const torch::Tensor& c, double sd,
                                      int draws) {
  auto sum = torch::zeros_like(c, torch::kFloat64);
  for (int i = 0; i < draws; ++i) sum += decode(c, i).to(torch::kFloat64);
  const double standard_error = sd / std::sqrt(static_cast<double>(draws));
  return ((sum / draws - c.to(torch::kFloat64)).abs().max().item<double>()) / standard_error;
}

constexpr int kDraws = 400;
constexpr double kStandardErrors = 5;

TEST(CompressionHooks, QsgdIsUnbiasedAndDeterministicRoundingIsCaught) {
  const int s = 4;  // few levels: a large rounding step, the harder case
  const auto c = gradient(0, 0, 64);
  const double norm = c.norm().item<double>();
  // One draw's element is norm / s times a Bernoulli(p) level offset: variance
  // norm^2 / s^2 * p (1 - p) <= norm^2 / (4 s^2).
  const double sd = norm / (2 * s);
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    const double unbiased = worst_error_in_standard_errors(
        decoded_by(qsgd_hook({s, /*seed=*/3}), *group), c, sd, kDraws);
    EXPECT_LT(unbiased, kStandardErrors);
    // The stand-in: QSGD's levels rounded to the nearest instead of stochastically.
    const Decoder nearest = [&](const torch::Tensor& x, int64_t) {
      return (x.abs() / norm * s).round() * x.sign() * norm / s;
    };
    EXPECT_GT(worst_error_in_standard_errors(nearest, c, sd, kDraws), kStandardErrors);
  });
}

TEST(CompressionHooks, TernGradIsUnbiasedAndDeterministicRoundingIsCaught) {
  const auto c = gradient(1, 0, 64);
  const double scale = c.abs().max().item<double>();
  // One draw's element is scale * Bernoulli(|c| / scale) with c's sign: variance
  // scale |c| - c^2 <= scale^2 / 4.
  const double sd = scale / 2;
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    const double unbiased = worst_error_in_standard_errors(
        decoded_by(terngrad_hook({/*seed=*/3}), *group), c, sd, kDraws);
    EXPECT_LT(unbiased, kStandardErrors);
    // The stand-in: sign(c) where |c| >= scale / 2, else 0.
    const Decoder nearest = [&](const torch::Tensor& x, int64_t) {
      return (x.abs() / scale).round() * x.sign() * scale;
    };
    EXPECT_GT(worst_error_in_standard_errors(nearest, c, sd, kDraws), kStandardErrors);
  });
}

// Both ranks hold the same gradient. Were their random numbers alike, both would round alike
// and the average would be one rank's decoded vector: a whole number of steps (norm / s for
// QSGD, scale for TernGrad) everywhere. Drawn per rank, some elements land halfway.
TEST(CompressionHooks, QsgdAndTernGradRoundDifferentlyOnEachRank) {
  const auto c = gradient(0, 0, 64);
  const double norm = c.norm().item<double>();
  const double scale = c.abs().max().item<double>();
  const int s = 4;
  std::vector<torch::Tensor> qsgd(2), terngrad(2);
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto q = bucket_of(c);
    reduce(*qsgd_hook({s, /*seed=*/1}), *group, q);
    qsgd[rank] = q.buffer;
    auto t = bucket_of(c);
    reduce(*terngrad_hook({/*seed=*/1}), *group, t);
    terngrad[rank] = t.buffer;
  });
  EXPECT_TRUE(torch::equal(qsgd[0], qsgd[1]));
  EXPECT_TRUE(torch::equal(terngrad[0], terngrad[1]));
  auto halfway = [](const torch::Tensor& steps) {
    return ((steps - steps.round()).abs() > 0.25).sum().item<int64_t>();
  };
  EXPECT_GT(halfway(qsgd[0].to(torch::kFloat64) * s / norm), 0);
  EXPECT_GT(halfway(terngrad[0].to(torch::kFloat64) / scale), 0);
}

// scale = mean |c|; each element becomes +scale or -scale by its sign, 0 counting as +.
TEST(CompressionHooks, SignSendsTheMeanMagnitudeWithEachSign) {
  const auto c = torch::tensor({0.0f, 2.0f, -4.0f, 0.0f, 1.0f, -0.5f, 3.0f, -1.5f, 0.25f, 0.0f});
  const float scale = c.abs().mean().item<float>();
  const auto want =
      torch::tensor({1.0f, 1.0f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, -1.0f, 1.0f, 1.0f}) * scale;
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    auto bucket = bucket_of(c);
    const PendingReduction reduction = reduce(*sign_hook(), *group, bucket);
    EXPECT_TRUE(torch::equal(bucket.buffer, want)) << bucket.buffer << want;
    EXPECT_EQ(reduction.wire_bytes, 4u + 2u);  // the scale, then 10 bits in 2 bytes
  });
}

// ---- error feedback

struct Made {
  std::string name;
  std::function<std::shared_ptr<CompressionHook>()> make;
};

std::vector<Made> feedback_hooks() {
  return {{"topk", [] { return top_k_hook({0.1}); }},
          {"randomk",
           [] {
             return random_k_hook({0.1, /*seed=*/9});
           }},
          {"sign", [] { return sign_hook(); }}};
}

// sum_r (g_r + e_r before) == W * output + sum_r e_r after, at every one of 10 steps: what the
// ranks sent (W times the average) plus what they kept is exactly what they had.
TEST(CompressionHooks, ErrorFeedbackLosesNothingAtAnyStep) {
  const int64_t n = 50;
  const int steps = 10;
  for (const Made& made : feedback_hooks()) {
    for (int world : {1, 2}) {
      SCOPED_TRACE(made.name + ", world " + std::to_string(world));
      // [step][rank]
      std::vector<std::vector<torch::Tensor>> had(steps, std::vector<torch::Tensor>(world));
      auto kept = had, output = had;
      run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
        auto hook = made.make();
        for (int step = 0; step < steps; ++step) {
          auto before = hook->residual(0);
          if (!before.defined()) before = torch::zeros({n});
          auto bucket = bucket_of(gradient(rank, step, n), 0, step);
          had[step][rank] = bucket.buffer + before;
          reduce(*hook, *group, bucket);
          output[step][rank] = bucket.buffer.clone();
          kept[step][rank] = hook->residual(0);
        }
      });
      for (int step = 0; step < steps; ++step) {
        auto lhs = torch::zeros({n});
        auto rhs = output[step][0] * world;
        for (int rank = 0; rank < world; ++rank) {
          ASSERT_TRUE(kept[step][rank].defined()) << "no residual at step " << step;
          EXPECT_TRUE(torch::equal(output[step][rank], output[step][0])) << "rank " << rank;
          lhs += had[step][rank];
          rhs += kept[step][rank];
        }
        // Float rounding only: the sign hook's residual c - scale * sign(c) and the division
        // by W and multiplication back each round once, relative to magnitudes of about 3.
        EXPECT_TRUE(torch::allclose(lhs, rhs, /*rtol=*/1e-6, /*atol=*/2e-6))
            << "step " << step << ": off by " << (lhs - rhs).abs().max().item<float>();
        // The residual is not trivially zero: something was held back.
        EXPECT_GT(kept[step][0].abs().max().item<float>(), 0.01f) << "step " << step;
      }
    }
  }
}

// ---- under DDP

// Bytes each rank hands to the allgather (or allreduce) for a bucket of n float32.
size_t expected_wire_bytes(const std::string& hook, int64_t n) {
  if (hook == "topk") return 8 * sparse_count(0.05, n);
  if (hook == "randomk") return 4 * sparse_count(0.05, n);
  if (hook == "qsgd") return 4 + n;
  if (hook == "terngrad") return 4 + (n + 3) / 4;
  if (hook == "sign") return 4 + (n + 7) / 8;
  ADD_FAILURE() << "no hook " << hook;
  return 0;
}

std::vector<Made> every_hook() {
  return {{"topk", [] { return top_k_hook({0.05}); }},
          {"randomk",
           [] {
             return random_k_hook({0.05, /*seed=*/4});
           }},
          {"qsgd",
           [] {
             return qsgd_hook({16, /*seed=*/4});
           }},
          {"terngrad", [] { return terngrad_hook({/*seed=*/4}); }},
          {"sign", [] { return sign_hook(); }}};
}

// Weights from a formula (rank 0's are broadcast by DDP anyway), inputs from the rank and step.
torch::nn::Sequential model() {
  auto net = layers({10, 32, 32, 4});
  torch::NoGradGuard no_grad;
  int k = 0;
  for (auto& p : net->parameters()) {
    p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat32) * 0.731 + ++k).view_as(p) * 0.3);
  }
  return net;
}

TEST(CompressionHooks, UnderDdpRanksStayBitwiseIdenticalAndReportPayloadBytes) {
  for (const Made& made : every_hook()) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(made.name + ", world " + std::to_string(world));
      std::vector<std::vector<torch::Tensor>> final_parameters(world);
      std::vector<torch::Tensor> first_parameters(world);
      run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
        auto net = model();
        DdpOptions options;
        options.comm_hook = made.make();
        options.bucket_cap_mb = 0.002;  // about 500 gradients: several buckets of varied sizes
        options.first_bucket_cap_mb = 0.0005;
        DistributedDataParallel ddp(net, group, options);
        first_parameters[rank] = net->parameters()[0].detach().clone();
        torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
        for (int step = 0; step < 10; ++step) {
          auto x = torch::sin(torch::arange(40, torch::kFloat32).view({4, 10}) * 0.21 * (rank + 1) +
                              step);
          sgd.zero_grad();
          net->forward(x).pow(2).mean().backward();
          const auto& buckets = ddp.last_iteration_stats().buckets;
          ASSERT_GE(buckets.size(), 3u);
          for (const BucketStats& b : buckets) {
            EXPECT_EQ(b.reduced_bytes, expected_wire_bytes(made.name, b.bytes / 4))
                << "a bucket of " << b.bytes / 4 << " gradients, step " << step;
          }
          sgd.step();
        }
        for (const auto& p : net->parameters())
          final_parameters[rank].push_back(p.detach().clone());
      });
      ASSERT_EQ(final_parameters[0].size(), 6u);
      EXPECT_FALSE(torch::equal(final_parameters[0][0], first_parameters[0])) << "nothing trained";
      for (int rank = 1; rank < world; ++rank) {
        for (size_t i = 0; i < final_parameters[0].size(); ++i) {
          EXPECT_TRUE(torch::equal(final_parameters[rank][i], final_parameters[0][i]))
              << "rank " << rank << ", parameter " << i;
        }
      }
      for (const auto& p : final_parameters[0]) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
    }
  }
}

// A bucket of no gradients (a parameter with no elements) sends empty payloads and stays empty.
// An inf gradient (an overflow the GradScaler will skip) must not live on in the residual: the
// next finite step decodes to finite values, for every hook with error feedback.
TEST(CompressionHooks, ANonFiniteGradientIsNotCarriedIntoLaterSteps) {
  for (const auto& made : feedback_hooks()) {
    SCOPED_TRACE(made.name);
    run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
      auto hook = made.make();
      auto overflowed = gradient(0, 0, 64);
      overflowed[5] = std::numeric_limits<float>::infinity();
      GradBucket first = bucket_of(overflowed, 0, 0);
      reduce(*hook, *group, first);
      EXPECT_TRUE(torch::isfinite(hook->residual(0)).all().item<bool>());
      GradBucket second = bucket_of(gradient(0, 1, 64), 0, 1);
      reduce(*hook, *group, second);
      EXPECT_TRUE(torch::isfinite(second.buffer).all().item<bool>());
    });
  }
}

// DDP rebuilds its buckets after the first iteration. A bucket of the same size that now holds
// other parameters (or the same in another order) starts a new residual instead of adding the
// old one to the wrong gradients.
TEST(CompressionHooks, ARebuiltBucketOfTheSameSizeStartsANewResidual) {
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    auto hook = top_k_hook({0.25});
    auto a = torch::zeros({32}), b = torch::zeros({32});
    GradBucket first = bucket_of(gradient(0, 0, 64), 0, 0);
    first.parameters = {a, b};
    reduce(*hook, *group, first);
    ASSERT_GT(hook->residual(0).abs().sum().item<float>(), 0);
    GradBucket same = bucket_of(torch::zeros({64}), 0, 1);
    same.parameters = {a, b};
    reduce(*hook, *group, same);  // compensated = the old residual: some of it is sent
    EXPECT_GT(same.buffer.abs().sum().item<float>(), 0);
    GradBucket rebuilt = bucket_of(torch::zeros({64}), 0, 2);
    rebuilt.parameters = {b, a};
    reduce(*hook, *group, rebuilt);  // a new layout: nothing carried, nothing sent
    EXPECT_EQ(rebuilt.buffer.abs().sum().item<float>(), 0);
    EXPECT_EQ(hook->residual(0).abs().sum().item<float>(), 0);
  });
}

TEST(CompressionHooks, EmptyBucketsPassThrough) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    for (const Made& made : every_hook()) {
      auto hook = made.make();
      auto bucket = bucket_of(torch::zeros({0}));
      const PendingReduction reduction = reduce(*hook, *group, bucket);
      EXPECT_EQ(bucket.buffer.numel(), 0) << made.name;
      EXPECT_EQ(reduction.wire_bytes, expected_wire_bytes(made.name, 0)) << made.name;
    }
  });
}

// ---- errors

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not InvalidArgument: ") + e.what();
  }
  return "nothing thrown";
}

TEST(CompressionHooks, BadOptionsAreRefusedNamingTheHook) {
  const double not_a_number = std::numeric_limits<double>::quiet_NaN();
  for (double ratio : {0.0, 1.5, -0.1, not_a_number}) {
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    const std::string top = error_of([&] { top_k_hook({ratio}); });
    EXPECT_NE(top.find("topk hook: ratio"), std::string::npos) << top;
    EXPECT_NE(top.find("(0, 1]"), std::string::npos) << top;
    const std::string random_message = error_of([&] { random_k_hook({ratio}); });
    EXPECT_NE(random_message.find("randomk hook: ratio"), std::string::npos) << random_message;
  }
  for (int levels : {0, -1, 128}) {
    const std::string qsgd = error_of([&] { qsgd_hook({levels}); });
    EXPECT_NE(qsgd.find("qsgd hook: levels " + std::to_string(levels)), std::string::npos) << qsgd;
    EXPECT_NE(qsgd.find("1..127"), std::string::npos) << qsgd;
  }
  EXPECT_EQ(error_of([] { qsgd_hook({127}); }), "nothing thrown");
  EXPECT_EQ(error_of([] { top_k_hook({1.0}); }), "nothing thrown");
}

TEST(CompressionHooks, NonFloat32BucketsAreRefusedNamingHookAndBucket) {
  run_with_groups(1, [](int, std::shared_ptr<Group> group) {
    for (const Made& made : every_hook()) {
      for (auto dtype : {torch::kBFloat16, torch::kFloat64}) {
        auto hook = made.make();
        auto bucket = bucket_of(torch::ones({6}, dtype), /*index=*/3);
        const std::string message = error_of([&] { hook->start(*group, bucket); });
        EXPECT_NE(message.find(made.name + " hook, bucket 3 (6 x "), std::string::npos) << message;
        EXPECT_NE(message.find("float32"), std::string::npos) << message;
      }
    }
  });
}

}  // namespace compression_hooks_test
}  // namespace cohort::testing
