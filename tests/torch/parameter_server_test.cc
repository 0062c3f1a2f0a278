// The parameter server (parameter_server.h): synchronous steps against DDP, the staleness
// bound under random delays, sharding, pulls, backup workers, hybrid, dead workers and
// servers, and bad input. Ranks are threads; every model and batch is made on the main thread.
#include "cohort/torch/async/parameter_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>

#include "async/pair_groups.h"
#include "checkpoint_files.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp/ddp.h"
#include "ddp_harness.h"
#include "local_training.h"

namespace cohort::testing {
namespace parameter_server_test {

constexpr int kPerWorker = 3;

std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> parameters) {
  return std::make_unique<torch::optim::SGD>(std::move(parameters), sgd_momentum());
}

// `world` copies of one model, made on this (the main) thread: rank threads never draw from
// torch's global generator.
std::vector<torch::nn::Sequential> copies_of_one_model(int world) {
  torch::set_num_threads(1);
  torch::manual_seed(99);
  auto initial = small_mlp();
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < world; ++r) models.push_back(copy_of(initial));
  return models;
}

// The gradient of `model` on worker `worker`'s rows of step `step`, in its .grad.
void compute_gradient(torch::nn::Sequential& model, const StepData& data, int step, int worker) {
  model->zero_grad();
  loss_of(model, data.inputs_of(step, worker, kPerWorker),
          data.targets_of(step, worker, kPerWorker))
      .backward();
}

// What a job of servers and workers ended with.
struct PsResult {
  std::vector<std::vector<torch::Tensor>> worker_final;  // by worker index
  std::vector<ServerStats> server_stats;                 // by server index
  std::vector<std::vector<torch::Tensor>> server_model;  // each server's whole model after
};

// Per-worker hooks into the training loop (worker index, step).
struct WorkerHooks {
  std::function<void(int worker, int step, ParameterServer& ps)> before_push;
  std::function<void(int worker, int step, ParameterServer& ps)> after_wait;
  // Leaves the job (destroys its ParameterServer without finish()) before this step.
  std::function<bool(int worker, int step)> dies_at;
};

struct PsJob {
  int world = 3;
  int steps = 20;
  int first_step = 0;  // of the data: a resumed job trains steps first_step..first_step+steps-1
  ParameterServerOptions options;
  WorkerHooks hooks;
  std::vector<std::string> node_of;  // hybrid: over TCP, rank r on node node_of[r]
};

PsResult run_ps(const PsJob& job) {
  const int workers = job.world - job.options.num_servers;
  const auto data = make_step_data(job.first_step + job.steps, workers * kPerWorker);
  std::vector<torch::nn::Sequential> models = copies_of_one_model(job.world);
  PsResult result;
  result.worker_final.resize(static_cast<size_t>(workers));
  result.server_stats.resize(static_cast<size_t>(job.options.num_servers));
  result.server_model.resize(static_cast<size_t>(job.options.num_servers));
  auto body = [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    auto ps = ParameterServer::create(group, *model, make_sgd, job.options);
    if (ps->is_server()) {
      ps->serve();
      result.server_stats[static_cast<size_t>(ps->server_index())] = ps->stats();
      result.server_model[static_cast<size_t>(ps->server_index())] = snapshot(model->parameters());
      return;
    }
    const int w = ps->worker_index();
    for (int s = job.first_step; s < job.first_step + job.steps; ++s) {
      if (job.hooks.dies_at && job.hooks.dies_at(w, s)) {
        ps.reset();
        return;
      }
      compute_gradient(model, data, s, w);
      if (job.hooks.before_push) job.hooks.before_push(w, s, *ps);
      ps->push();
      ps->wait_for_parameters();
      if (job.hooks.after_wait) job.hooks.after_wait(w, s, *ps);
    }
    ps->finish();
    result.worker_final[static_cast<size_t>(w)] = snapshot(model->parameters());
  };
  if (job.node_of.empty()) {
    run_with_groups(job.world, body);
  } else {
    run_with_groups_on_nodes(job.node_of, body);
  }
  return result;
}

// DDP over `workers` ranks on the same slices (of batches of `samples` rows; default: the
// workers' rows), with the same optimizer.
std::vector<torch::Tensor> train_ddp(int workers, int steps, int64_t samples = 0) {
  const auto data = make_step_data(steps, samples > 0 ? samples : workers * kPerWorker);
  std::vector<torch::nn::Sequential> models = copies_of_one_model(workers);
  run_with_groups(workers, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    DistributedDataParallel ddp(model, group);
    torch::optim::SGD sgd(model->parameters(), sgd_momentum());
    for (int s = 0; s < steps; ++s) {
      sgd.zero_grad();
      loss_of(model, data.inputs_of(s, rank, kPerWorker), data.targets_of(s, rank, kPerWorker))
          .backward();
      sgd.step();
    }
  });
  return snapshot(models[0]->parameters());
}

ParameterServerOptions synchronous(int num_servers) {
  ParameterServerOptions options;
  options.num_servers = num_servers;
  options.consistency = Consistency::kSynchronous;
  return options;
}

// ---------------------------------------------------------------- sharding

TEST(AssignToServers, CompleteDisjointAndBalanced) {
  const std::vector<int64_t> numels = {1000, 10, 500, 500, 7, 64, 1000, 3, 250};
  for (int servers = 1; servers <= 5; ++servers) {
    const auto server_of = assign_to_servers(numels, servers);
    ASSERT_EQ(server_of.size(), numels.size());  // every parameter, each to exactly one server
    std::vector<int64_t> load(static_cast<size_t>(servers), 0);
    for (size_t i = 0; i < numels.size(); ++i) {
      ASSERT_GE(server_of[i], 0);
      ASSERT_LT(server_of[i], servers);
      load[static_cast<size_t>(server_of[i])] += numels[i];
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 1000) << servers << " servers";  // within the largest tensor
  }
  EXPECT_EQ(assign_to_servers({4, 4, 4, 4}, 2), (std::vector<int>{0, 1, 0, 1}));
}

TEST(ParameterServer, EveryServerHoldsItsShardAndWorkersTheWhole) {
  PsJob job;
  job.world = 5;  // three servers, two workers
  job.steps = 3;
  job.options = synchronous(3);
  const PsResult r = run_ps(job);
  // Each server's model holds its own shard's trained values; the workers' final models are
  // put together from the shards of all servers.
  const auto layout = assign_to_servers({16 * 10, 16, 4 * 16, 4}, 3);
  for (size_t i = 0; i < layout.size(); ++i) {
    const auto& from_server = r.server_model[static_cast<size_t>(layout[i])][i];
    EXPECT_TRUE(torch::equal(r.worker_final[0][i], from_server)) << "parameter " << i;
    EXPECT_TRUE(torch::equal(r.worker_final[1][i], from_server)) << "parameter " << i;
  }
}

// ---------------------------------------------------------------- synchronous = DDP

TEST(ParameterServer, SynchronousEqualsDdpWithOneServer) {
  PsJob job;
  job.world = 3;
  job.options = synchronous(1);
  const PsResult r = run_ps(job);
  const auto ddp = train_ddp(2, job.steps);
  EXPECT_EQ(compare(r.worker_final[0], ddp, 1e-6, 1e-7), "");
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.worker_final[1]));
  EXPECT_EQ(r.server_stats[0].version, job.steps);
  EXPECT_EQ(r.server_stats[0].staleness_counts, (std::vector<int64_t>{2 * job.steps}));
}

TEST(ParameterServer, StalenessZeroEqualsDdpWithTwoServers) {
  PsJob job;
  job.world = 4;
  job.options.num_servers = 2;
  job.options.consistency = Consistency::kBoundedStaleness;
  job.options.staleness = 0;
  const PsResult r = run_ps(job);
  const auto ddp = train_ddp(2, job.steps);
  EXPECT_EQ(compare(r.worker_final[0], ddp, 1e-6, 1e-7), "");
  EXPECT_EQ(compare(r.worker_final[1], ddp, 1e-6, 1e-7), "");
}

// ---------------------------------------------------------------- pulls

// With plain SGD at lr 1 and one worker, the parameters pulled after a push are the server's
// current ones: the old parameters minus the gradient just pushed.
TEST(ParameterServer, PullAfterPushReturnsTheServersValues) {
  const auto data = make_step_data(4, kPerWorker);
  std::vector<torch::nn::Sequential> models = copies_of_one_model(3);
  auto plain_sgd = [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(std::move(p), torch::optim::SGDOptions(1.0));
  };
  ParameterServerOptions options;
  options.num_servers = 2;
  options.consistency = Consistency::kAsynchronous;
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    auto ps = ParameterServer::create(group, *model, plain_sgd, options);
    if (ps->is_server()) return ps->serve();
    for (int s = 0; s < 4; ++s) {
      compute_gradient(model, data, s, 0);
      std::vector<torch::Tensor> expected;
      for (const auto& p : model->parameters()) expected.push_back((p - p.grad()).detach());
      ps->step();
      EXPECT_EQ(compare(snapshot(model->parameters()), expected, 1e-6, 1e-7), "") << "step " << s;
      EXPECT_EQ(ps->parameter_version(), s + 1);
    }
    ps->finish();
  });
}

// ---------------------------------------------------------------- the staleness bound

// Random compute times per worker and step; the bound must hold for every gradient applied
// (servers' histograms) and for every parameter version a worker computes on.
void expect_bound_holds(int staleness, int servers) {
  PsJob job;
  job.world = 3 + servers;
  job.steps = 60;
  job.options.num_servers = servers;
  job.options.staleness = staleness;
  std::mutex mutex;
  std::mt19937 random(7);
  std::vector<int> work;  // per worker and step, made here (the input of the property)
  for (int i = 0; i < 3 * job.steps; ++i) work.push_back(static_cast<int>(random() % 200000));
  std::atomic<int64_t> worst_lag{0};
  job.hooks.before_push = [&](int w, int s, ParameterServer&) {
    // Uneven compute: a random amount of arithmetic before each push, so the workers reach
    // the servers in ever different orders.
    volatile double sink = 0;
    for (int i = 0; i < work[static_cast<size_t>(w * job.steps + s)]; ++i) sink = sink + i;
  };
  job.hooks.after_wait = [&](int, int s, ParameterServer& ps) {
    // The next gradient (clock s + 1) is computed on this version.
    const int64_t lag = (s + 1) - ps.parameter_version();
    std::lock_guard<std::mutex> lock(mutex);
    worst_lag = std::max(worst_lag.load(), lag);
  };
  const PsResult r = run_ps(job);
  EXPECT_LE(worst_lag.load(), staleness);
  for (const auto& stats : r.server_stats) {
    EXPECT_LE(stats.staleness_counts.size(), static_cast<size_t>(staleness) + 1)
        << "a gradient was applied " << stats.staleness_counts.size() - 1 << " steps stale";
    EXPECT_EQ(stats.applied, 3 * job.steps);
    EXPECT_EQ(stats.version, job.steps);
  }
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.worker_final[2]));
}

TEST(ParameterServer, StalenessBoundOneHoldsUnderRandomDelays) {
  expect_bound_holds(1, 1);
}
TEST(ParameterServer, StalenessBoundThreeHoldsUnderRandomDelays) {
  expect_bound_holds(3, 2);
}

TEST(ParameterServer, AsynchronousAppliesEveryGradientAlone) {
  PsJob job;
  job.world = 4;
  job.steps = 15;
  job.options.consistency = Consistency::kAsynchronous;
  const PsResult r = run_ps(job);
  EXPECT_EQ(r.server_stats[0].version, 3 * job.steps);
  EXPECT_EQ(r.server_stats[0].applied, 3 * job.steps);
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.worker_final[1]));
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.server_model[0]));
}

// ---------------------------------------------------------------- backup workers

// Worker 2 pushes each gradient only once the other two hold parameters newer than the ones
// it computed on, and they push each step only once worker 2 holds that step's parameters:
// with one backup worker it is always too late, so the job trains exactly as the two others
// would.
TEST(ParameterServer, BackupWorkerDropsTheLateGradient) {
  PsJob job;
  job.world = 4;
  job.options = synchronous(1);
  job.options.backup_workers = 1;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int64_t> steps_done(3, 0);  // steps whose wait_for_parameters returned
  int64_t late_worker_holds = -1;         // the version worker 2 computes on, once it has it
  job.hooks.after_wait = [&](int w, int s, ParameterServer&) {
    std::lock_guard<std::mutex> lock(mutex);
    steps_done[static_cast<size_t>(w)] = s + 1;
    changed.notify_all();
  };
  job.hooks.before_push = [&](int w, int s, ParameterServer& ps) {
    std::unique_lock<std::mutex> lock(mutex);
    if (w != 2) {
      // Not before worker 2 holds version s: its first pull, made when it is created, may
      // otherwise come after step 0 and fetch version 1.
      changed.wait(lock, [&] { return late_worker_holds >= s; });
      return;
    }
    late_worker_holds = ps.parameter_version();
    changed.notify_all();
    EXPECT_EQ(late_worker_holds, s) << "the hooks let the fast workers run ahead";
    // A fast worker that finished step s holds version s + 1.
    changed.wait(lock, [&] { return steps_done[0] > s && steps_done[1] > s; });
  };
  const PsResult r = run_ps(job);
  EXPECT_EQ(r.server_stats[0].dropped, job.steps);
  EXPECT_EQ(r.server_stats[0].applied, 2 * job.steps);
  // Only workers 0 and 1 count: DDP over two ranks on rows 0..5 of the same batches.
  const auto ddp = train_ddp(2, job.steps, 3 * kPerWorker);
  EXPECT_EQ(compare(r.worker_final[0], ddp, 1e-6, 1e-7), "");
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.worker_final[2]));
}

// ---------------------------------------------------------------- hybrid

// Two nodes of two workers and a server on a third: each node averages, the server averages
// the two nodes: the mean of all four gradients, as DDP over four ranks.
TEST(ParameterServer, HybridSynchronousEqualsDdp) {
  PsJob job;
  job.world = 5;
  job.options = synchronous(1);
  job.options.hybrid = true;
  job.node_of = {"a", "a", "b", "b", "c"};
  const PsResult r = run_ps(job);
  const auto ddp = train_ddp(4, job.steps);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(compare(r.worker_final[static_cast<size_t>(w)], ddp, 1e-5, 1e-6), "") << w;
  }
  EXPECT_EQ(r.server_stats[0].client_ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.server_stats[0].applied, 2 * job.steps);
}

// Nodes of 3 workers and 1 worker: the server weighs each node's mean by its workers, so the
// step is still the mean of all four gradients.
TEST(ParameterServer, HybridWeighsNodesByTheirWorkers) {
  PsJob job;
  job.world = 5;
  job.options = synchronous(1);
  job.options.hybrid = true;
  job.node_of = {"a", "a", "a", "b", "c"};
  const PsResult r = run_ps(job);
  const auto ddp = train_ddp(4, job.steps);
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(compare(r.worker_final[static_cast<size_t>(w)], ddp, 1e-5, 1e-6), "") << w;
  }
}

// ---------------------------------------------------------------- server checkpoints

// Sets COHORT_JOB_ID (server checkpoints record it and resume only their own job's) for its
// lifetime, and puts back what was there.
class ScopedJobId {
 public:
  explicit ScopedJobId(const char* id) {
    const char* before = std::getenv("COHORT_JOB_ID");
    had_ = before != nullptr;
    if (had_) before_ = before;
    setenv("COHORT_JOB_ID", id, 1);
  }
  ~ScopedJobId() {
    if (had_) {
      setenv("COHORT_JOB_ID", before_.c_str(), 1);
    } else {
      unsetenv("COHORT_JOB_ID");
    }
  }
  ScopedJobId(const ScopedJobId&) = delete;
  ScopedJobId& operator=(const ScopedJobId&) = delete;

 private:
  bool had_ = false;
  std::string before_;
};

// A job stopped after 10 steps and started again from the servers' checkpoints ends where one
// job of 20 steps ends: the parameters, the momentum and the step count were all restored.
TEST(ParameterServer, ServerCheckpointsResumeTheJob) {
  const ScopedJobId job_id("ps-resume");
  const std::string path = ::testing::TempDir() + "/ps_resume_" + std::to_string(::getpid());
  PsJob whole;
  whole.world = 4;
  whole.options = synchronous(2);
  const PsResult uninterrupted = run_ps(whole);
  PsJob first = whole;
  first.steps = 10;
  first.options.checkpoint = path;
  first.options.checkpoint_every = 5;
  run_ps(first);
  PsJob second = first;
  second.first_step = 10;
  const PsResult resumed = run_ps(second);
  EXPECT_EQ(resumed.server_stats[0].version, 20);
  EXPECT_TRUE(bitwise_equal(resumed.worker_final[0], uninterrupted.worker_final[0]));
  for (int i = 0; i < 2; ++i) std::remove((path + ".server" + std::to_string(i)).c_str());
}

// Under bounded staleness a resumed server counts its clients' clocks from its restored step:
// none of their gradients is taken for a late one.
TEST(ParameterServer, ResumedBoundedStalenessAppliesEveryGradient) {
  const ScopedJobId job_id("ps-ssp");
  const std::string path = ::testing::TempDir() + "/ps_ssp_" + std::to_string(::getpid());
  PsJob job;
  job.world = 3;
  job.steps = 8;
  job.options.staleness = 2;
  job.options.checkpoint = path;
  job.options.checkpoint_every = 4;
  run_ps(job);
  job.first_step = 8;
  const PsResult resumed = run_ps(job);
  EXPECT_EQ(resumed.server_stats[0].version, 16);
  EXPECT_EQ(resumed.server_stats[0].applied, 2 * 8);
  EXPECT_EQ(resumed.server_stats[0].dropped, 0);
  std::remove((path + ".server0").c_str());
}

// A 2-rank job (worker 0, server 1) of two steps that saves its server checkpoint at `path`.
PsJob two_step_job_saving_at(const std::string& path) {
  PsJob job;
  job.world = 2;
  job.steps = 2;
  job.options = synchronous(1);
  job.options.checkpoint = path;
  job.options.checkpoint_every = 1;
  return job;
}

// What each rank of a 2-rank ParameterServer::create with `options` threw ("" for nothing),
// every rank's model being layers({10, 8, 4}).
std::vector<std::string> create_errors(const ParameterServerOptions& options) {
  std::vector<std::string> errors(2);
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto model = layers({10, 8, 4});
    try {
      ParameterServer::create(group, *model, make_sgd, options);
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  return errors;
}

TEST(ParameterServer, ACheckpointOfAnotherModelIsRefused) {
  const ScopedJobId job_id("ps-other-model");
  const std::string path = ::testing::TempDir() + "/ps_other_" + std::to_string(::getpid());
  PsJob job = two_step_job_saving_at(path);
  run_ps(job);
  const std::vector<std::string> errors = create_errors(job.options);
  EXPECT_NE(errors[1].find("cannot restore the server checkpoint " + path + ".server0"),
            std::string::npos)
      << errors[1];
  // The worker hears of it at once, not at its deadline.
  EXPECT_NE(errors[0].find("parameter server rank 1 failed to start"), std::string::npos)
      << errors[0];
  std::remove((path + ".server0").c_str());
}

// Issue 35: without resume_any_job a file of another job (COHORT_JOB_ID) was passed over with a
// warning and replaced. Now the server refuses to start, naming both ways on, and the workers
// hear it at once; the file is left as it was.
TEST(ParameterServer, AnotherJobsServerCheckpointIsNeitherResumedNorReplacedUnasked) {
  const ScopedJobId first_job("ps-job-x");
  const std::string path = ::testing::TempDir() + "/ps_refuse_" + std::to_string(::getpid());
  PsJob job = two_step_job_saving_at(path);
  run_ps(job);
  const std::string saved = read_bytes(path + ".server0");
  const ScopedJobId second_job("ps-job-y");
  const std::vector<std::string> errors = create_errors(job.options);
  EXPECT_NE(errors[1].find("was written by another job"), std::string::npos) << errors[1];
  EXPECT_NE(errors[1].find("ParameterServerOptions::start_afresh"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("parameter server rank 1 failed to start"), std::string::npos)
      << errors[0];
  EXPECT_EQ(read_bytes(path + ".server0"), saved);
  std::remove((path + ".server0").c_str());
}

// With start_afresh the job starts from the model and replaces the file.
TEST(ParameterServer, AnotherJobsServerCheckpointIsReplacedWhenStartingAfresh) {
  const std::string path = ::testing::TempDir() + "/ps_job_" + std::to_string(::getpid());
  PsJob job;
  job.world = 3;
  job.steps = 4;
  job.options = synchronous(1);
  job.options.checkpoint = path;
  job.options.checkpoint_every = 2;
  PsResult first, again;
  {
    const ScopedJobId job_id("ps-job-a");
    first = run_ps(job);
  }
  {
    const ScopedJobId job_id("ps-job-b");
    job.options.start_afresh = true;
    again = run_ps(job);
  }
  EXPECT_EQ(again.server_stats[0].version, 4);
  EXPECT_TRUE(bitwise_equal(again.worker_final[0], first.worker_final[0]));
  std::remove((path + ".server0").c_str());
}

// ---------------------------------------------------------------- faults

TEST(ParameterServer, DeadWorkerLeavesTheOthersTraining) {
  PsJob job;
  job.world = 4;
  job.options = synchronous(1);
  job.hooks.dies_at = [](int w, int s) { return w == 1 && s == 5; };
  const PsResult r = run_ps(job);
  const ServerStats& stats = r.server_stats[0];
  EXPECT_EQ(stats.dead_workers, (std::vector<int>{1}));
  EXPECT_EQ(stats.version, job.steps);
  EXPECT_EQ(stats.applied, 3 * 5 + 2 * (job.steps - 5));
  EXPECT_TRUE(bitwise_equal(r.worker_final[0], r.worker_final[2]));
}

TEST(ParameterServer, DeadServerFailsTheWorkersNamingIt) {
  std::vector<torch::nn::Sequential> models = copies_of_one_model(4);
  const auto data = make_step_data(1, 2 * kPerWorker);
  std::vector<std::string> errors(4);
  std::vector<int> failed_rank(4, -2);
  ParameterServerOptions options = synchronous(2);
  run_with_groups(4, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    if (rank >= 2) {
      auto ps = ParameterServer::create(group, *model, make_sgd, options);
      if (rank == 3) return;  // server 1 dies: its ParameterServer goes without serving
      try {
        ps->serve();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
      return;
    }
    try {
      auto ps = ParameterServer::create(group, *model, make_sgd, options);
      for (int s = 0; s < 3; ++s) {
        compute_gradient(model, data, 0, rank);
        ps->step();
      }
    } catch (const PeerError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
      failed_rank[static_cast<size_t>(rank)] = e.failed_rank();
    }
  });
  for (int w = 0; w < 2; ++w) {
    EXPECT_EQ(failed_rank[static_cast<size_t>(w)], 3) << errors[static_cast<size_t>(w)];
    EXPECT_NE(errors[static_cast<size_t>(w)].find("lost parameter server rank 3"),
              std::string::npos)
        << errors[static_cast<size_t>(w)];
  }
}

// A server that fails by itself (its optimizer throws) fails serve() with that error and every
// worker with a PeerError naming it.
TEST(ParameterServer, AFailingServerFailsTheWorkersNamingIt) {
  struct Exploding : torch::optim::SGD {
    using torch::optim::SGD::SGD;
    torch::Tensor step(LossClosure) override { throw std::runtime_error("optimizer exploded"); }
  };
  auto exploding = [](std::vector<torch::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<Exploding>(std::move(p), torch::optim::SGDOptions(0.1));
  };
  std::vector<torch::nn::Sequential> models = copies_of_one_model(4);
  const auto data = make_step_data(1, 3 * kPerWorker);
  std::vector<std::string> errors(4);
  std::vector<int> failed_rank(4, -2);
  run_with_groups(4, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    auto ps = ParameterServer::create(group, *model, exploding, synchronous(1));
    try {
      if (ps->is_server()) return ps->serve();
      compute_gradient(model, data, 0, rank);
      ps->step();
    } catch (const PeerError& e) {
      errors[static_cast<size_t>(rank)] = e.what();
      failed_rank[static_cast<size_t>(rank)] = e.failed_rank();
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  EXPECT_EQ(errors[3], "optimizer exploded");
  for (int w = 0; w < 3; ++w) EXPECT_EQ(failed_rank[static_cast<size_t>(w)], 3) << errors[w];
}

// A worker that stops pushing is dropped after the timeout, and the steps it held up go on
// without it: the bound never leaves the others waiting for good.
TEST(ParameterServer, AStalledWorkerIsDroppedAndTheOthersGoOn) {
  std::vector<torch::nn::Sequential> models = copies_of_one_model(3);
  const auto data = make_step_data(1, 2 * kPerWorker);
  ParameterServerOptions options;
  options.staleness = 1;
  options.timeout = std::chrono::milliseconds(1500);
  std::mutex mutex;
  std::condition_variable changed;
  bool worker0_done = false;
  ServerStats stats;
  std::string error;
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    auto& model = models[static_cast<size_t>(rank)];
    auto ps = ParameterServer::create(group, *model, make_sgd, options);
    if (ps->is_server()) {
      ps->serve();
      stats = ps->stats();
      return;
    }
    auto step = [&] {
      compute_gradient(model, data, 0, rank);
      ps->step();
    };
    step();           // clock 0: step 0 is taken
    if (rank == 1) {  // then stalls until worker 0 is done, and leaves
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] { return worker0_done; });
      return;
    }
    try {
      for (int s = 1; s < 4; ++s) step();  // clock 2 needs step 1, held up by worker 1
      ps->finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(mutex);
    worker0_done = true;
    changed.notify_all();
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(stats.dead_workers, (std::vector<int>{1}));
  EXPECT_EQ(stats.version, 4);
}

// ---------------------------------------------------------------- bad input

TEST(ParameterServer, ModelThatDiffersIsRefusedNamingTheParameter) {
  std::vector<std::string> errors(3);
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Sequential model(torch::nn::Linear(10, rank == 2 ? 8 : 16), torch::nn::ReLU(),
                                torch::nn::Linear(rank == 2 ? 8 : 16, 4));
    try {
      ParameterServer::create(group, *model, make_sgd, synchronous(1));
    } catch (const InvalidArgument& e) {
      errors[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (const auto& e : errors) EXPECT_NE(e.find("0.weight"), std::string::npos) << e;
}

TEST(ParameterServer, OptionsThatDoNotFitAreRefused) {
  std::vector<std::string> errors;
  std::mutex mutex;
  auto refused = [&](ParameterServerOptions options) {
    run_with_groups(3, [&](int, std::shared_ptr<Group> group) {
      auto model = small_mlp();
      try {
        ParameterServer::create(group, *model, make_sgd, options);
      } catch (const InvalidArgument& e) {
        std::lock_guard<std::mutex> lock(mutex);
        errors.push_back(e.what());
        return;
      }
      ADD_FAILURE() << "not refused";
    });
  };
  ParameterServerOptions all_servers;
  all_servers.num_servers = 3;
  refused(all_servers);
  ParameterServerOptions backup_with_staleness;
  backup_with_staleness.staleness = 2;
  backup_with_staleness.backup_workers = 1;
  refused(backup_with_staleness);
  ParameterServerOptions too_many_backups = synchronous(1);
  too_many_backups.backup_workers = 2;
  refused(too_many_backups);
  ASSERT_EQ(errors.size(), 9u);
  // More servers than trained tensors: 2 servers for a model of one tensor.
  std::vector<std::string> one_tensor(3);
  run_with_groups(3, [&](int rank, std::shared_ptr<Group> group) {
    torch::nn::Linear model(torch::nn::LinearOptions(4, 2).bias(false));
    try {
      ParameterServer::create(group, *model, make_sgd, synchronous(2));
    } catch (const InvalidArgument& e) {
      one_tensor[static_cast<size_t>(rank)] = e.what();
    }
  });
  for (const auto& e : one_tensor) {
    EXPECT_NE(e.find("num_servers = 2 but the model has only 1 trained parameters"),
              std::string::npos)
        << e;
  }
  EXPECT_NE(errors[0].find("num_servers = 3"), std::string::npos) << errors[0];
  EXPECT_NE(errors[3].find("backup_workers = 1 needs synchronous"), std::string::npos) << errors[3];
  EXPECT_NE(errors[6].find("backup_workers = 2 must be in [0, 2)"), std::string::npos) << errors[6];
}

TEST(ParameterServer, WorkerCallsOnAServerAreRefused) {
  std::vector<std::string> errors(2);
  run_with_groups(2, [&](int rank, std::shared_ptr<Group> group) {
    auto model = small_mlp();
    auto ps = ParameterServer::create(group, *model, make_sgd, synchronous(1));
    if (ps->is_server()) {
      try {
        ps->push();
      } catch (const InvalidArgument& e) {
        errors[1] = e.what();
      }
      return ps->serve();
    }
    try {
      ps->serve();
    } catch (const InvalidArgument& e) {
      errors[0] = e.what();
    }
    ps->finish();
  });
  EXPECT_NE(errors[0].find("serve() is for servers"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("push() is for workers"), std::string::npos) << errors[1];
}

TEST(PairErrors, NameTheRanksOfTheGroup) {
  EXPECT_EQ(ps::with_group_ranks("recv failed on rank 1: lost the connection to rank 0 (x); "
                                 "receive from rank 0; server rank 1 failed; on rank 10 stays",
                                 7, 3),
            "recv failed on rank 3: lost the connection to rank 7 (x); receive from rank 7; "
            "server rank 1 failed; on rank 10 stays");
  // Issue 35: "rank 0 aborted the group" meant the server, rank 2 of the job.
  EXPECT_EQ(ps::with_group_ranks("rank 0 aborted the group: rank 1 (pid 12) died; rank 1 ok", 2, 5),
            "rank 2 aborted the group: rank 5 (pid 12) died; rank 1 ok");
}

TEST(Consistency, NamesRoundTrip) {
  for (auto c :
       {Consistency::kSynchronous, Consistency::kBoundedStaleness, Consistency::kAsynchronous}) {
    EXPECT_EQ(parse_consistency(consistency_name(c)), c);
  }
  EXPECT_THROW(parse_consistency("bsp"), InvalidArgument);
}

}  // namespace parameter_server_test
}  // namespace cohort::testing
