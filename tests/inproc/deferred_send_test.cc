// The in-process transport copies a message inside isend(), so an algorithm that changes a send
// buffer before waiting for the send, or that only works because sends complete at once, passes
// the other sweeps. A socket transport reads the buffer later. Here every send is handed to a
// background thread that delivers it when it gets to it (in order per rank, so the per
// (peer, tag) FIFO contract holds), and the send's request completes only then. Every variant
// of every reducing and gathering collective must still produce the closed-form results.
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "cohort/comm/prefix_store.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using testing::run_ranks;

class DeferredSendTransport final : public Transport {
 public:
  DeferredSendTransport(std::shared_ptr<InprocFabric> fabric, int rank)
      : fabric_(fabric), inner_(std::move(fabric), rank), courier_([this] { deliver_loop(); }) {}
  ~DeferredSendTransport() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    queued_.notify_all();
    courier_.join();
  }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* name() const override { return "deferred-inproc"; }

  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override {
    auto state = std::make_shared<SendState>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(Job{peer, tag, data, bytes, deadline, state});
    }
    queued_.notify_all();
    return std::make_unique<DeferredRequest>(state);
  }
  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override {
    return inner_.irecv(peer, tag, data, bytes, deadline);
  }
  void abort(std::exception_ptr error) noexcept override { inner_.abort(error); }
  std::unique_ptr<Transport> split(const SplitSpec& spec) override {
    return std::make_unique<DeferredSendTransport>(fabric_->child(spec.key, spec.new_size()),
                                                   spec.new_rank(inner_.rank()));
  }

 private:
  struct SendState {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
  };
  struct Job {
    int peer;
    Tag tag;
    const void* data;
    size_t bytes;
    Deadline deadline;
    std::shared_ptr<SendState> state;
  };
  class DeferredRequest final : public Request {
   public:
    explicit DeferredRequest(std::shared_ptr<SendState> state) : state_(std::move(state)) {}
    void wait() override {
      std::unique_lock<std::mutex> lock(state_->mutex);
      state_->done_cv.wait(lock, [&] { return state_->done; });
      if (state_->error) std::rethrow_exception(state_->error);
    }

   private:
    std::shared_ptr<SendState> state_;
  };

  void deliver_loop() {
    size_t delivered = 0;
    for (;;) {
      std::optional<Job> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      // Late, and later still now and then: the sender runs ahead of its data. The delay is
      // what this transport is for (a slow wire), not a wait for another thread; the tests
      // hold whatever the delays are.
      std::this_thread::yield();
      if (++delivered % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::exception_ptr error;
      try {
        inner_.isend(job->peer, job->tag, job->data, job->bytes, job->deadline)->wait();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(job->state->mutex);
      job->state->done = true;
      job->state->error = error;
      job->state->done_cv.notify_all();
    }
  }

  std::shared_ptr<InprocFabric> fabric_;
  InprocTransport inner_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread courier_;  // last: starts once everything above exists
};

std::vector<std::shared_ptr<Group>> make_deferred_groups(int world) {
  auto fabric = std::make_shared<InprocFabric>(world);
  std::vector<std::shared_ptr<Group>> groups;
  for (int r = 0; r < world; ++r) {
    groups.push_back(std::make_shared<Group>(std::make_unique<DeferredSendTransport>(fabric, r),
                                             std::make_shared<PrefixStore>("g", fabric->store()),
                                             testing::quick_options()));
  }
  return groups;
}

const Algorithm kAll[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kHalvingDoubling,
                          Algorithm::kDirect};
const DType kDTypes[] = {DType::kFloat32, DType::kInt8};

// One round of every collective with every algorithm (unsupported ones fall back to auto).
void sweep_once(Group& group, size_t count, DType dtype, ReduceOp op, Algorithm algorithm) {
  const int world = group.size();
  const int me = group.rank();
  const auto n = static_cast<size_t>(world);
  const size_t esize = dtype_size(dtype);
  CollectiveOptions opts;
  opts.op = op;
  opts.algorithm = algorithm;
  opts.root = static_cast<int>(count % n);
  auto context = [&](const char* what) {
    return std::string(what) + " " + algorithm_name(algorithm) + " " + dtype_name(dtype) +
           " count " + std::to_string(count) + " world " + std::to_string(world);
  };

  std::vector<uint8_t> data(count * esize + 1);
  testing::fill_sweep(data.data(), count, dtype, op, me);
  group.allreduce(Buffer{data.data(), count, dtype}, opts);
  testing::fail_if(group, testing::check_sweep(data.data(), count, dtype, op, world),
                   context("allreduce"));

  testing::fill_sweep(data.data(), count, dtype, op, me);
  group.reduce(Buffer{data.data(), count, dtype}, opts);
  if (me == opts.root) {
    testing::fail_if(group, testing::check_sweep(data.data(), count, dtype, op, world),
                     context("reduce"));
  }

  testing::fill_movement(data.data(), count, dtype, me);
  group.broadcast(Buffer{data.data(), count, dtype}, opts);
  testing::fail_if(
      group,
      testing::check_movement(
          data.data(), count, dtype, [&](size_t) { return opts.root; }, [](size_t i) { return i; }),
      context("broadcast"));

  std::vector<uint8_t> all(n * count * esize + 1);
  testing::fill_movement(data.data(), count, dtype, me);
  group.allgather(ConstBuffer{data.data(), count, dtype}, Buffer{all.data(), n * count, dtype},
                  opts);
  testing::fail_if(
      group,
      testing::check_movement(
          all.data(), n * count, dtype, [&](size_t i) { return static_cast<int>(i / count); },
          [&](size_t i) { return i % count; }),
      context("allgather"));

  testing::fill_sweep(all.data(), n * count, dtype, op, me);
  group.reduce_scatter(ConstBuffer{all.data(), n * count, dtype}, Buffer{data.data(), count, dtype},
                       opts);
  testing::fail_if(
      group,
      testing::check_sweep(data.data(), count, dtype, op, world, static_cast<size_t>(me) * count),
      context("reduce_scatter"));
}

class DeferredSends : public ::testing::TestWithParam<int> {};

TEST_P(DeferredSends, EveryVariantWithLateSends) {
  const int world = GetParam();
  auto groups = make_deferred_groups(world);
  std::vector<size_t> counts = testing::sweep_small_counts(world);
  // Several segments per transfer.
  counts.push_back(testing::small_scale() ? 9001 : 100003);
  run_ranks(world, [&](int rank) {
    for (Algorithm algorithm : kAll) {
      for (DType dtype : kDTypes) {
        for (size_t count : counts) {
          sweep_once(*groups[rank], count, dtype, ReduceOp::kSum, algorithm);
        }
      }
    }
    sweep_once(*groups[rank], 1000, DType::kFloat32, ReduceOp::kMax, Algorithm::kAuto);
  });
}

INSTANTIATE_TEST_SUITE_P(World, DeferredSends, ::testing::Values(2, 3, 4, 5, 7, 8));

}  // namespace
}  // namespace cohort
