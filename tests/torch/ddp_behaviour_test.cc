// DistributedDataParallel beyond the numbers: errors that name what is wrong instead of
// hanging, no communication under no_sync, bucket layout and rebuild, gradients in buckets.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <type_traits>

#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/tensor_memory.h"
#include "ddp_harness.h"
#include "support/log_capture.h"

namespace cohort::testing {
namespace ddp_behaviour_test {

// The user's most common out-of-step bug (Note [Call stamps]): the constructor is collective,
// but only rank 0 calls it, and rank 1 goes on to its own allreduce. Every rank is told, in
// terms of the API, instead of rank 0 ending in bad_alloc or a truncation.
TEST(DdpBehaviour, ConstructedOnOneRankOnlyIsNamedOnEveryRank) {
  for (bool shared_memory : {false, true}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "tcp");
    const auto errors = errors_of(
        2,
        [](int rank, std::shared_ptr<Group> group) {
          if (rank == 0) {
            DistributedDataParallel ddp(layers({10, 32, 4}), group);
          } else {
            std::vector<float> loss(1, 1.0f);
            group->allreduce(make_buffer(loss));
          }
        },
        /*over_tcp=*/true, shared_memory);
    for (const auto& error : errors) {
      EXPECT_EQ(error.rfind("MismatchError: ", 0), 0u) << error;
      EXPECT_NE(error.find("rank 0 called allgather(count=2, dtype=int64) in "
                           "DistributedDataParallel's constructor"),
                std::string::npos)
          << error;
      EXPECT_NE(error.find("rank 1 called allreduce(count=1, dtype=float32, op=sum)"),
                std::string::npos)
          << error;
    }
  }
}

TEST(DdpBehaviour, MismatchedShapeNamesTheParameterAndTheRanks) {
  const auto errors = errors_of(3, [](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, rank == 2 ? 33 : 32, 4});
    DistributedDataParallel ddp(net, group);
  });
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(errors[rank].find("'0.weight'"), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("[33, 10]"), std::string::npos) << errors[rank];
    EXPECT_NE(errors[rank].find("on rank 2"), std::string::npos) << errors[rank];
  }
}

TEST(DdpBehaviour, MissingLayerNamesTheCounts) {
  const auto errors = errors_of(2, [](int rank, std::shared_ptr<Group> group) {
    DistributedDataParallel ddp(
        layers(rank == 1 ? std::vector<int64_t>{10, 4, 4} : std::vector<int64_t>{10, 4}), group);
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("rank 0 has 2"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 1 has 4"), std::string::npos) << error;
  }
}

TEST(DdpBehaviour, UnexpectedUnusedParameterIsNamedAndTheJobGoesOn) {
  auto make = branchy([](int, int) { return false; });
  const auto errors = errors_of(2, [&](int, std::shared_ptr<Group> group) {
    auto model = make();
    DistributedDataParallel ddp(model, group);
    for (int step = 0; step < 2; ++step) {  // the reducer is ready again after the error
      try {
        model->forward(torch::randn({3, 10}), step, group->rank()).sum().backward();
        throw std::runtime_error("no error");
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        if (what.find("branch.weight") == std::string::npos ||
            what.find("find_unused_parameters") == std::string::npos) {
          throw;
        }
      }
    }
    group->barrier();  // the group still works
  });
  for (const auto& error : errors) EXPECT_EQ(error, "");
}

TEST(DdpBehaviour, NoSyncSendsNothing) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 16, 4});
    DistributedDataParallel ddp(net, group);
    const auto before = group->sequence_number();
    {
      auto guard = ddp.no_sync();
      EXPECT_THROW(ddp.no_sync(), InvalidArgument);  // guards do not nest
      net->forward(torch::randn({3, 10})).sum().backward();
      net->forward(torch::randn({3, 10})).sum().backward();
    }
    EXPECT_EQ(group->sequence_number(), before);
    net->forward(torch::randn({3, 10})).sum().backward();
    EXPECT_GT(group->sequence_number(), before);
  });
}

// A guard variable that outlives several guards: default-constructed, assigned a guard, and
// assigned an empty one, which ends the guard it held (and a self-move keeps it).
TEST(DdpBehaviour, NoSyncIsMoveAssignable) {
  static_assert(std::is_nothrow_move_assignable<DistributedDataParallel::NoSync>::value, "");
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 16, 4});
    DistributedDataParallel ddp(net, group);
    const auto before = group->sequence_number();
    DistributedDataParallel::NoSync guard;
    guard = ddp.no_sync();
    auto& same = guard;
    guard = std::move(same);
    EXPECT_THROW(ddp.no_sync(), InvalidArgument);  // still inside it
    net->forward(torch::randn({3, 10})).sum().backward();
    EXPECT_EQ(group->sequence_number(), before);
    guard = DistributedDataParallel::NoSync();  // ends it
    net->forward(torch::randn({3, 10})).sum().backward();
    EXPECT_GT(group->sequence_number(), before);
    guard = ddp.no_sync();  // a new one, ended by the destructor
  });
}

// COHORT_LOG_LEVEL=info: rank 0 says how DDP bucketed the gradients, once when built and once
// when the buckets are rebuilt after the first backward.
TEST(DdpBehaviour, LogsItsBucketsAtInfo) {
  LogCapture capture;
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 64, 4});  // 0.weight 0.bias 1.weight 1.bias
    DdpOptions options;
    options.bucket_cap_mb = 0;  // one bucket per parameter
    options.first_bucket_cap_mb = 0;
    DistributedDataParallel ddp(net, group, options);
    net->forward(torch::randn({3, 10})).sum().backward();
  });
  const auto lines = capture.info_lines("DistributedDataParallel on group");
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    EXPECT_NE(line.find("(2 ranks): 4 buckets"), std::string::npos) << line;
    EXPECT_NE(line.find("4 parameters, 3.77 KiB of gradients"), std::string::npos) << line;
    EXPECT_NE(line.find(": 1 KiB, 1 parameter (1.weight)"), std::string::npos) << line;
  }
  EXPECT_NE(lines[0].find("buckets built"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("bucket 0: 16 B, 1 parameter (1.bias)"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("buckets rebuilt"), std::string::npos) << lines[1];
}

TEST(DdpBehaviour, IterationStatsAndTimelineDescribeEveryBucket) {
  auto timeline = std::make_shared<Timeline>("unused.json");
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, 64, 64, 4});
    DdpOptions options;
    options.bucket_cap_mb = 0;  // one bucket per parameter: 6
    options.first_bucket_cap_mb = 0;
    if (rank == 0) options.timeline = timeline;
    DistributedDataParallel ddp(net, group, options);
    // Every figure is a stretch of time inside this backward, on the same clock: none can be
    // longer than the whole call (a figure from an unset time stamp would be hours).
    const auto start = std::chrono::steady_clock::now();
    net->forward(torch::randn({3, 10})).sum().backward();
    const double call_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const IterationStats& stats = ddp.last_iteration_stats();
    ASSERT_EQ(stats.buckets.size(), ddp.bucket_parameter_names().size());
    EXPECT_EQ(stats.buckets.size(), 6u);
    EXPECT_LE(stats.exposed_comm_ms, call_ms);
    size_t bytes = 0;
    for (const BucketStats& b : stats.buckets) {
      EXPECT_GE(b.latency_ms + 1e-6, b.comm_ms) << "the latency includes the time on the wire";
      EXPECT_LE(b.latency_ms, call_ms);
      bytes += b.bytes;
    }
    size_t expected = 0;
    for (const auto& p : net->parameters()) expected += static_cast<size_t>(p.nbytes());
    EXPECT_EQ(bytes, expected);
  });
  size_t buckets = 0, waits = 0;
  for (const Timeline::Span& span : timeline->spans()) {
    EXPECT_LE(span.start, span.end);
    buckets += span.track == "comm" && span.name.rfind("bucket ", 0) == 0;
    waits += span.track == "main" && span.name == "wait for gradients";
  }
  EXPECT_EQ(buckets, 6u);
  EXPECT_EQ(waits, 1u);
}

// DistributedDataParallel::rebucket (the planner's online correction): the next backward
// rebuilds the buckets with the new cap, and its gradients come out whole (equal to those of the
// same backward again, the parameters unchanged).
TEST(DdpBehaviour, RebucketRebuildsAtTheEndOfTheNextBackwardAndLosesNoGradient) {
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, 64, 64, 4});
    DdpOptions options;
    options.first_bucket_cap_mb = 1e-6;  // every bucket by the cap below
    DistributedDataParallel ddp(net, group, options);
    const auto inputs = torch::full({3, 10}, static_cast<float>(rank + 1));
    auto backward = [&] {
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
      net->forward(inputs).sum().backward();
      std::vector<torch::Tensor> grads;
      for (auto& p : net->parameters()) grads.push_back(p.grad().clone());
      return grads;
    };
    backward();  // the first rebuild
    EXPECT_EQ(ddp.bucket_parameter_names().size(), 2u);  // 16 B, then 25 MiB for the rest
    ddp.rebucket(1e-6);                                  // one parameter per bucket
    const auto rebuilt = backward();
    EXPECT_EQ(ddp.bucket_parameter_names().size(), 6u);
    const auto again = backward();
    EXPECT_EQ(ddp.last_iteration_stats().buckets.size(), 6u);
    for (size_t i = 0; i < again.size(); ++i) EXPECT_TRUE(torch::equal(rebuilt[i], again[i])) << i;
    EXPECT_THROW(ddp.rebucket(0), InvalidArgument);
  });
}

// Note [Registered buckets]: on ranks that share a host, the buckets are registered memory
// (reduced in place) unless the option turns it off; the parity tests check the numbers.
TEST(DdpBehaviour, BucketsAreSharedMemoryOnOneHostUnlessTurnedOff) {
  for (const bool registered : {true, false}) {
    SCOPED_TRACE(registered ? "registered buckets" : "private buckets");
    run_with_groups(
        3,
        [&](int, std::shared_ptr<Group> group) {
          auto net = layers({10, 64, 64, 4});
          DdpOptions options;
          options.bucket_cap_mb = 0.01;  // several buckets
          options.first_bucket_cap_mb = 0.01;
          options.registered_buckets = registered;
          DistributedDataParallel ddp(net, group, options);
          for (int step = 0; step < 2; ++step) {  // the second after the buckets' rebuild
            net->forward(torch::ones({3, 10})).sum().backward();
            const IterationStats& stats = ddp.last_iteration_stats();
            ASSERT_GT(stats.buckets.size(), 1u);
            for (const BucketStats& b : stats.buckets) EXPECT_EQ(b.shared_memory, registered);
          }
        },
        /*over_tcp=*/true, /*shared_memory=*/true);
  }
}

// A registered bucket is memory libtorch's allocator never saw: it still counts as tensor
// memory (tensor_memory.h) while DDP holds it, as a private bucket does, so that a run's
// measured peak (the planner's accuracy log) includes its gradients.
TEST(DdpBehaviour, RegisteredBucketsCountAsTensorMemory) {
  track_cpu_tensor_memory();
  ASSERT_TRUE(tracking_cpu_tensor_memory());
  for (const bool registered : {true, false}) {
    SCOPED_TRACE(registered ? "registered buckets" : "private buckets");
    run_with_groups(
        2,
        [&](int rank, std::shared_ptr<Group> group) {
          auto net = layers({10, 256, 256, 4});
          int64_t gradient_bytes = 0;
          for (const auto& p : net->parameters()) gradient_bytes += p.nbytes();
          group->barrier();
          const int64_t before = cpu_tensor_bytes();
          group->barrier();
          {
            DdpOptions options;
            options.registered_buckets = registered;
            DistributedDataParallel ddp(net, group, options);
            net->forward(torch::ones({3, 10})).sum().backward();
            EXPECT_EQ(ddp.last_iteration_stats().buckets.at(0).shared_memory, registered);
            group->barrier();
            // Both ranks' buckets, and the gradients they hold.
            if (rank == 0) EXPECT_GE(cpu_tensor_bytes() - before, 2 * gradient_bytes);
            for (const auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
            group->barrier();
          }
          group->barrier();
          if (rank == 0) EXPECT_LT(cpu_tensor_bytes() - before, gradient_bytes / 2);
        },
        /*over_tcp=*/true, /*shared_memory=*/true);
  }
}

TEST(DdpBehaviour, AWorldOfOneReportsNoBuckets) {
  run_with_groups(1, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 4});
    DistributedDataParallel ddp(net, group);
    net->forward(torch::randn({3, 10})).sum().backward();
    EXPECT_TRUE(ddp.last_iteration_stats().buckets.empty());
  });
}

TEST(DdpBehaviour, BucketsFollowTheOrderGradientsBecameReady) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto model = reordered()();
    DdpOptions options;
    options.bucket_cap_mb = 0;  // one parameter per bucket
    options.first_bucket_cap_mb = 0;
    DistributedDataParallel ddp(model, group, options);
    // Reverse registration order first: "early" was registered last.
    auto before = ddp.bucket_parameter_names();
    ASSERT_EQ(before.size(), 4u);
    EXPECT_EQ(before[0][0].rfind("early.", 0), 0u) << before[0][0];
    model->forward(torch::randn({3, 10}), 0, 0).sum().backward();
    // "late" runs last in forward, so its gradients are ready first.
    auto after = ddp.bucket_parameter_names();
    ASSERT_EQ(after.size(), 4u);
    EXPECT_EQ(after[0][0].rfind("late.", 0), 0u) << after[0][0];
    EXPECT_EQ(after[1][0].rfind("late.", 0), 0u) << after[1][0];
    EXPECT_EQ(after[3][0].rfind("early.", 0), 0u) << after[3][0];
  });
}

TEST(DdpBehaviour, GradientsLiveInTheBuckets) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    auto net = layers({10, 16, 4});
    DistributedDataParallel ddp(net, group);  // 25 MiB: one bucket for everything
    ASSERT_EQ(ddp.bucket_parameter_names().size(), 1u);
    net->forward(torch::randn({3, 10})).sum().backward();
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    optimizer.zero_grad();  // libtorch 1.13 detaches .grad in place: must not throw
    net->forward(torch::randn({3, 10})).sum().backward();
    const auto params = net->parameters();
    const auto* storage = params[0].grad().storage().data();
    for (const auto& p : params) EXPECT_EQ(p.grad().storage().data(), storage);
  });
}

// Issue 35: DDP had no memory() report while ZeRO and FSDP had one.
TEST(DdpBehaviour, MemoryReportCountsBucketsGradsAndOptimizerState) {
  run_with_groups(2, [](int, std::shared_ptr<Group> group) {
    for (const bool view : {true, false}) {
      auto net = layers({10, 16, 4});
      size_t model_bytes = 0;
      for (const auto& p : net->parameters()) model_bytes += p.nbytes();
      DdpOptions options;
      options.gradient_as_bucket_view = view;
      options.rebuild_buckets = false;  // which holds both sets of buckets for a moment
      DistributedDataParallel ddp(net, group, options);
      net->forward(torch::randn({3, 10})).sum().backward();
      torch::optim::Adam adam(net->parameters());
      adam.step();
      const MemoryReport report = ddp.memory(&adam);
      EXPECT_EQ(report.parameters, model_bytes);
      // The buckets, and the .grad beside them unless they are views into them.
      EXPECT_EQ(report.gradients, view ? model_bytes : 2 * model_bytes) << "view " << view;
      EXPECT_EQ(report.peak_gradients, report.gradients) << "view " << view;
      EXPECT_EQ(report.optimizer_state, 2 * model_bytes);  // Adam's two moments
      EXPECT_EQ(ddp.memory().optimizer_state, 0u);
    }
  });
}

TEST(DdpBehaviour, JoinStopsTheOthersWhenALoopFails) {
  const auto errors = errors_of(3, [](int rank, std::shared_ptr<Group> group) {
    auto net = layers({10, 4});
    DistributedDataParallel ddp(net, group);
    ddp.join([&] {
      for (int step = 0; step < 5; ++step) {
        if (rank == 1 && step == 2) throw std::runtime_error("out of disk");
        net->forward(torch::randn({3, 10})).sum().backward();
      }
    });
  });
  EXPECT_EQ(errors[1], "out of disk");
  for (int rank : {0, 2}) {
    EXPECT_NE(errors[rank].find("rank 1 left DistributedDataParallel::join with an error: "
                                "out of disk"),
              std::string::npos)
        << errors[rank];
  }
}

TEST(DdpBehaviour, StaticGraphRefusesAParameterThatWasUnused) {
  auto make = branchy([](int step, int) { return step > 0; });
  const auto errors = errors_of(2, [&](int, std::shared_ptr<Group> group) {
    auto model = make();
    DdpOptions options;
    options.static_graph = true;
    DistributedDataParallel ddp(model, group, options);
    for (int step = 0; step < 2; ++step) {
      model->forward(torch::randn({3, 10}), step, group->rank()).sum().backward();
    }
  });
  for (const auto& error : errors) {
    EXPECT_NE(error.find("static_graph"), std::string::npos) << error;
  }
}

TEST(DdpBehaviour, CpuOnlyAndReducibleTypesAreChecked) {
  run_with_groups(1, [](int, std::shared_ptr<Group> group) {
    auto net = layers({4, 2});
    net->to(torch::kComplexFloat);
    EXPECT_THROW(DistributedDataParallel(net, group), InvalidArgument);
    DdpOptions negative_cap;
    negative_cap.bucket_cap_mb = -1;
    EXPECT_THROW(DistributedDataParallel(layers({4, 2}), group, negative_cap), InvalidArgument);
  });
}

}  // namespace ddp_behaviour_test
}  // namespace cohort::testing
