// PowerSGD (include/cohort/torch/compress/powersgd.h): exact at full rank, error feedback
// loses nothing, every rank ends a step with the same parameters under DDP, the bytes it
// reports, and its refusals.
#include "cohort/torch/compress/powersgd.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"

namespace cohort::testing {
namespace powersgd_test {

// A bucket of three gradients back to back: a 6 x 4 matrix, a bias of 5 and a 3 x 7 matrix,
// with values that differ by rank and step.
constexpr int64_t kBucketNumel = 6 * 4 + 5 + 3 * 7;

GradBucket make_bucket(int rank, int64_t step) {
  GradBucket bucket;
  bucket.iteration = step;
  bucket.buffer = torch::sin(torch::arange(kBucketNumel, torch::kFloat32) * 0.37 * (rank + 1) +
                             static_cast<double>(step));
  bucket.gradients = {bucket.buffer.narrow(0, 0, 24).view({6, 4}), bucket.buffer.narrow(0, 24, 5),
                      bucket.buffer.narrow(0, 29, 21).view({3, 7})};
  return bucket;
}

void reduce(CommHook& hook, Group& group, GradBucket& bucket) {
  PendingReduction reduction = hook.start(group, bucket);
  reduction.work->wait();
  if (reduction.finish) reduction.finish();
}

torch::Tensor average_of_buckets(int world, int64_t step) {
  auto sum = torch::zeros({kBucketNumel});
  for (int r = 0; r < world; ++r) sum += make_bucket(r, step).buffer;
  return sum / world;
}

PowerSgdOptions full_rank() {
  PowerSgdOptions o;
  o.rank = 7;  // clamped to min(n, m) for each matrix: 4 and 3
  o.start_iter = 0;
  o.min_compression_rate = 0;
  return o;
}

TEST(PowerSgd, AtFullRankEqualsAllreduce) {
  for (int world : {1, 2, 3}) {
    std::vector<torch::Tensor> got(world);
    run_with_groups(world, [&](int rank, std::shared_ptr<Group> group) {
      PowerSgdHook hook(full_rank());
      for (int64_t step = 0; step < 3; ++step) {
        GradBucket bucket = make_bucket(rank, step);
        reduce(hook, *group, bucket);
        if (step == 2) got[rank] = bucket.buffer;
      }
    });
    const auto want = average_of_buckets(world, 2);
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(torch::allclose(got[r], want, 1e-4, 1e-5))
          << "world " << world << " rank " << r << ": max error "
          << (got[r] - want).abs().max().item<float>();
    }
  }
}

// At rank 1 the hook loses most of each matrix; error feedback keeps it:
//   sum_r (g_r + e_r before) == world * output + sum_r e_r after, every step.
TEST(PowerSgd, ErrorFeedbackCarriesWhatWasNotSent) {
  constexpr int kWorld = 2;
  constexpr int kSteps = 6;
  std::vector<std::vector<torch::Tensor>> before(kSteps, std::vector<torch::Tensor>(kWorld));
  auto after = before;
  auto outputs = before;
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    PowerSgdOptions o;
    o.rank = 1;
    o.start_iter = 0;
    o.min_compression_rate = 0;
    PowerSgdHook hook(o);
    for (int step = 0; step < kSteps; ++step) {
      GradBucket bucket = make_bucket(rank, step);
      auto residual = hook.residual(0);
      before[step][rank] =
          bucket.buffer + (residual.defined() ? residual : torch::zeros_like(bucket.buffer));
      reduce(hook, *group, bucket);
      after[step][rank] = hook.residual(0);
      outputs[step][rank] = bucket.buffer.clone();
    }
  });
  for (int step = 0; step < kSteps; ++step) {
    EXPECT_TRUE(torch::equal(outputs[step][0], outputs[step][1])) << "step " << step;
    const auto in = before[step][0] + before[step][1];
    const auto out = kWorld * outputs[step][0] + after[step][0] + after[step][1];
    EXPECT_TRUE(torch::allclose(in, out, 1e-4, 1e-5))
        << "step " << step << ": max difference " << (in - out).abs().max().item<float>();
    // Lossy at rank 1: something was carried over.
    EXPECT_GT(after[step][0].abs().max().item<float>(), 1e-3) << "step " << step;
  }
}

// CommHook::on_new_group (ElasticTrainer's next generation): the warm-started Q goes, so a hook
// that ran steps before compresses the next bucket as a fresh hook (a joiner's) does; a hook
// that kept its Q does not.
TEST(PowerSgd, ANewGroupStartsQAfreshAsAJoinersHookDoes) {
  run_with_groups(1, [&](int, std::shared_ptr<Group> group) {
    PowerSgdOptions o;
    o.rank = 1;
    o.start_iter = 0;
    o.min_compression_rate = 0;
    o.error_feedback = false;
    PowerSgdHook told(o), kept(o), joiner(o);
    for (int64_t step = 0; step < 3; ++step) {
      for (PowerSgdHook* hook : {&told, &kept}) {
        GradBucket bucket = make_bucket(0, step);
        reduce(*hook, *group, bucket);
      }
    }
    told.on_new_group();
    std::vector<torch::Tensor> out;
    for (PowerSgdHook* hook : {&told, &kept, &joiner}) {
      GradBucket bucket = make_bucket(0, 3);
      reduce(*hook, *group, bucket);
      out.push_back(bucket.buffer);
    }
    EXPECT_TRUE(torch::equal(out[0], out[2]));
    EXPECT_FALSE(torch::equal(out[1], out[2]));
  });
}

// Ten steps of DDP training at 3 ranks: before start_iter the buckets are averaged exactly,
// after it compressed; every rank holds the same parameters after every step.
TEST(PowerSgd, UnderDdpEveryRankEndsEachStepWithTheSameParameters) {
  constexpr int kWorld = 3;
  constexpr int kSteps = 10;
  torch::manual_seed(7);
  std::vector<torch::nn::Sequential> nets;
  for (int r = 0; r < kWorld; ++r) nets.push_back(layers({10, 32, 32, 4}));
  std::vector<std::vector<torch::Tensor>> params(kSteps * kWorld);
  std::vector<std::vector<size_t>> wire(kSteps);
  run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
    PowerSgdOptions o;
    o.start_iter = 3;
    DdpOptions options;
    options.comm_hook = powersgd_hook(o);
    auto net = nets[rank];
    DistributedDataParallel ddp(net, group, options);
    torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      sgd.zero_grad();
      auto x = torch::cos(torch::arange(40, torch::kFloat32).view({4, 10}) * (rank + step + 1));
      net->forward(x).pow(2).mean().backward();
      sgd.step();
      for (const auto& p : net->parameters()) params[step * kWorld + rank].push_back(p.clone());
      if (rank == 0) {
        for (const auto& b : ddp.last_iteration_stats().buckets)
          wire[step].push_back(b.reduced_bytes);
      }
    }
  });
  for (int step = 0; step < kSteps; ++step) {
    for (int r = 1; r < kWorld; ++r) {
      for (size_t i = 0; i < params[step * kWorld].size(); ++i) {
        EXPECT_TRUE(torch::equal(params[step * kWorld][i], params[step * kWorld + r][i]))
            << "step " << step << " rank " << r << " parameter " << i;
      }
    }
  }
  auto total = [](const std::vector<size_t>& v) {
    size_t sum = 0;
    for (size_t b : v) sum += b;
    return sum;
  };
  // Before start_iter: every gradient, 4 bytes each (10*32+32 + 32*32+32 + 32*4+4 = 1540).
  EXPECT_EQ(total(wire[2]), 1540u * 4);
  // After: P and Q of the 32 x 10 and 32 x 32 weights at rank 2 (64 + 20 and 64 + 64), and
  // the 4 x 32 weight (128 < 2 * 2 * 36: too small to gain) and the biases (68) whole.
  EXPECT_EQ(total(wire[3]), (64 + 20 + 64 + 64 + 128 + 68) * 4u);
}

TEST(PowerSgd, AtFullRankUnderDdpTrainsAsAllreduce) {
  constexpr int kWorld = 2;
  torch::manual_seed(11);
  auto prototype = layers({10, 16, 4});
  std::vector<std::vector<torch::Tensor>> final_params(2 * kWorld);
  for (int with_hook = 0; with_hook < 2; ++with_hook) {
    std::vector<torch::nn::Sequential> nets;
    for (int r = 0; r < kWorld; ++r) {
      auto net = layers({10, 16, 4});
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < net->parameters().size(); ++i) {
        net->parameters()[i].copy_(prototype->parameters()[i]);
      }
      nets.push_back(net);
    }
    run_with_groups(kWorld, [&](int rank, std::shared_ptr<Group> group) {
      DdpOptions options;
      if (with_hook) options.comm_hook = powersgd_hook(full_rank());
      auto net = nets[rank];
      DistributedDataParallel ddp(net, group, options);
      torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
      for (int step = 0; step < 8; ++step) {
        sgd.zero_grad();
        auto x =
            torch::sin(torch::arange(30, torch::kFloat32).view({3, 10}) * (rank + 2 * step + 1));
        net->forward(x).pow(2).mean().backward();
        sgd.step();
      }
      for (const auto& p : net->parameters())
        final_params[with_hook * kWorld + rank].push_back(p.clone());
    });
  }
  for (size_t i = 0; i < final_params[0].size(); ++i) {
    EXPECT_TRUE(torch::allclose(final_params[kWorld][i], final_params[0][i], 1e-4, 1e-5))
        << "parameter " << i << ": max difference "
        << (final_params[kWorld][i] - final_params[0][i]).abs().max().item<float>();
  }
}

TEST(PowerSgd, RefusesBadOptionsAndDtypesNamingHookAndBucket) {
  PowerSgdOptions zero_rank;
  zero_rank.rank = 0;
  try {
    PowerSgdHook hook(zero_rank);
    FAIL() << "rank 0 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd hook: rank must be at least 1"),
              std::string::npos)
        << e.what();
  }
  const auto errors = errors_of(1, [](int, std::shared_ptr<Group> group) {
    PowerSgdHook hook(full_rank());
    GradBucket bucket = make_bucket(0, 0);
    bucket.index = 3;
    bucket.buffer = bucket.buffer.to(torch::kBFloat16);
    reduce(hook, *group, bucket);
  });
  EXPECT_NE(errors[0].find("powersgd hook, bucket 3 (50 x BFloat16)"), std::string::npos)
      << errors[0];
}

}  // namespace powersgd_test
}  // namespace cohort::testing
