#include "ps_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cohort/comm/straggler.h"
#include "cohort/comm/timeline.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/async/parameter_server.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "dataset.h"
#include "evaluation.h"
#include "fmnist_models.h"
#include "optimizers.h"
#include "progress.h"
#include "ranks.h"
#include "step_metrics.h"

namespace fashion_mnist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kServerCheckpointEvery = 50;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ms_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// What the data-parallel strategies have and a parameter-server job does not.
void refuse_what_does_not_apply(const TrainOptions& o) {
  auto refuse = [&](bool given, const std::string& what) {
    if (given) {
      throw cohort::InvalidArgument(what + " does not apply to --mode " + o.mode +
                                    " (docs/async.md): leave it out, or use --mode sync");
    }
  };
  refuse(o.strategy != "ddp", "--strategy " + o.strategy);
  refuse(o.plan.bucket_cap.automatic || o.plan.memory_budget_mb > 0 || !o.plan.plan_out.empty(),
         "--bucket-cap-mb auto, --memory-budget-mb and --plan-out");
  refuse(o.precision != "fp32" || o.master_weights, "--precision/--master-weights");
  refuse(o.sync_bn, "--sync-bn");
  refuse(!o.comm_hook.name.empty() && o.comm_hook.name != "allreduce", "--comm-hook");
  refuse(o.local_sgd.period > 0, "--local-sgd");
  refuse(o.diloco.enabled(), "--diloco");
  refuse(o.checkpoint_every > 0, "--checkpoint-every (the servers checkpoint every 50 steps)");
  refuse(o.lr_schedule != "constant" || o.warmup() > 0, "--lr-schedule/--warmup-steps");
  refuse(o.mode == "ps" && o.staleness > 0, "--staleness (it is for --mode ssp)");
}

cohort::ParameterServerOptions server_options(const TrainOptions& o,
                                              std::shared_ptr<cohort::Timeline> timeline) {
  cohort::ParameterServerOptions p;
  p.num_servers = o.servers;
  p.consistency =
      o.mode == "ps" ? cohort::Consistency::kAsynchronous : cohort::Consistency::kBoundedStaleness;
  p.staleness = o.staleness;
  p.backup_workers = o.backup_workers;
  p.staleness_lr_scaling = o.staleness_lr_scaling;
  p.hybrid = o.hybrid;
  p.timeline = std::move(timeline);
  // The servers' checkpoints: <--checkpoint>.server<i>, every kServerCheckpointEvery steps.
  p.checkpoint = o.checkpoint;
  p.checkpoint_every = kServerCheckpointEvery;
  p.resume_any_job = o.resume;
  p.start_afresh = o.overwrite_checkpoint;
  return p;
}

std::string staleness_histogram(const cohort::ServerStats& stats) {
  std::string text;
  double sum = 0;
  for (size_t t = 0; t < stats.staleness_counts.size(); ++t) {
    if (stats.staleness_counts[t] == 0) continue;
    text += " " + std::to_string(t) + ":" + std::to_string(stats.staleness_counts[t]);
    sum += static_cast<double>(t) * static_cast<double>(stats.staleness_counts[t]);
  }
  char mean[48];
  std::snprintf(mean, sizeof mean, " (mean %.2f)",
                stats.applied > 0 ? sum / static_cast<double>(stats.applied) : 0.0);
  return text + mean;
}

// --metrics under ps and ssp: each server's figures, the staleness histogram among them, in
// "<metrics>.server<i>.json".
void write_server_metrics(const std::string& metrics, int index, int rank,
                          const cohort::ServerStats& s) {
  const nlohmann::json figures = {{"rank", rank},
                                  {"steps", s.version},
                                  {"applied", s.applied},
                                  {"dropped", s.dropped},
                                  {"staleness_counts", s.staleness_counts},
                                  {"dead_workers", s.dead_workers},
                                  {"client_ranks", s.client_ranks},
                                  {"mean_push_interval_ms", s.mean_push_interval_ms},
                                  {"slowest_worker", s.slowest_worker},
                                  {"slowest_ratio", s.slowest_ratio}};
  const std::string path = metrics + ".server" + std::to_string(index) + ".json";
  std::ofstream out(path);
  out << figures.dump() << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

void print_server_report(int rank, const cohort::ServerStats& s) {
  std::printf(
      "server rank %d: %lld steps, %lld gradients applied, %lld dropped late; "
      "staleness:%s\n",
      rank, (long long)s.version, (long long)s.applied, (long long)s.dropped,
      staleness_histogram(s).c_str());
  if (s.slowest_worker >= 0) {
    std::printf(
        "server rank %d: slowest worker: rank %d, pushes %.2fx as far apart as the "
        "median\n",
        rank, s.slowest_worker, s.slowest_ratio);
  }
  for (int dead : s.dead_workers) {
    std::printf("server rank %d: worker rank %d died; the others went on\n", rank, dead);
  }
  std::fflush(stdout);
}

class PsTrainer {
 public:
  PsTrainer(const TrainOptions& options, std::shared_ptr<cohort::Group> group)
      : options_(options), group_(std::move(group)) {
    refuse_what_does_not_apply(options_);
    const int workers = group_->size() - options_.servers;
    COHORT_CHECK(workers > 0, "--servers ", options_.servers, " leaves no worker in a job of ",
                 group_->size(), " ranks");
    COHORT_CHECK(options_.batch_size % workers == 0, "--batch-size ", options_.batch_size,
                 " does not split evenly over the ", workers,
                 " workers (the ranks that are not --servers): give a multiple of ", workers);
    torch::set_num_threads(cohort_examples::threads_per_rank(options_.threads, *group_));
    const bool worker = group_->rank() < group_->size() - options_.servers;
    workers_ = group_->split(worker ? 0 : -1, group_->rank());
    torch::manual_seed(options_.seed);  // the same initial weights everywhere
    model_ = make_fmnist_model(options_.model);
    if (options_.activation_checkpointing) checkpoint_conv_stack(*model_, options_, false);
    ps_ = cohort::ParameterServer::create(
        group_, *model_, [this](std::vector<torch::Tensor> shard) { return optimizer_of(shard); },
        server_options(options_, timeline_));
  }

  TrainResult run() {
    TrainResult result = ps_->is_server() ? serve() : work();
    if (timeline_) timeline_->write(*group_);
    return result;
  }

 private:
  // The optimizer of a server's shard; its tensors keep the names of the model's parameters.
  std::unique_ptr<torch::optim::Optimizer> optimizer_of(const std::vector<torch::Tensor>& shard) {
    cohort_examples::NamedParameters named;
    for (const auto& item : model_->named_parameters()) {
      for (const auto& t : shard) {
        if (t.is_same(item.value())) named.insert(item.key(), t);
      }
    }
    return cohort_examples::make_optimizer(options_.optimizer, named,
                                           options_.optimizer_settings(model_.get()));
  }

  TrainResult serve() {
    if (const int64_t resumed = ps_->stats().version; resumed > 0) {
      std::printf("server rank %d: resumed from its checkpoint at step %lld\n", group_->rank(),
                  (long long)resumed);
      std::fflush(stdout);
    }
    ps_->serve();
    const cohort::ServerStats stats = ps_->stats();
    print_server_report(group_->rank(), stats);
    if (!options_.metrics.empty()) {
      write_server_metrics(options_.metrics, ps_->server_index(), group_->rank(), stats);
    }
    return {};
  }

  TrainResult work();
  void train_epoch(
      torch::data::StatelessDataLoader<FashionMnist, cohort::DistributedSampler>& loader,
      int64_t epoch, int64_t steps_in_epoch, int64_t skip);
  int64_t steps_done_before() const;
  void finish_figures(const Images& test, TrainResult& result);
  void report_alone(const cohort::Error& error, TrainResult& result) const;
  bool out_of_budget() const {
    return (options_.max_steps > 0 && steps_ >= options_.max_steps) ||
           (options_.time_limit_s > 0 && seconds_since(start_) >= options_.time_limit_s);
  }

  TrainOptions options_;
  std::shared_ptr<cohort::Group> group_;
  std::shared_ptr<cohort::Group> workers_;  // null on servers
  std::shared_ptr<cohort::Timeline> timeline_ = cohort::Timeline::from_env();
  std::shared_ptr<FmnistModel> model_;
  std::unique_ptr<cohort::ParameterServer> ps_;
  cohort::SlowDown slow_ = cohort::SlowDown::from_env(group_->rank());
  Clock::time_point start_;
  int64_t steps_ = 0;
  int64_t samples_ = 0;
  std::unique_ptr<cohort_examples::Progress> progress_;
  std::unique_ptr<cohort_examples::MetricsFile> metrics_;  // the first worker's steps
};

// A job restarted from the servers' checkpoints goes on where they were: each worker has
// made about version steps (bounded staleness) or version / (workers that push)
// (asynchronous).
int64_t PsTrainer::steps_done_before() const {
  const int64_t version = ps_->parameter_version();
  return options_.mode == "ps" ? version / static_cast<int64_t>(ps_->client_ranks().size())
                               : version;
}

TrainResult PsTrainer::work() {
  FashionMnist train_set(load_split(options_.data_dir, Split::kTrain));
  const Images test = options_.skip_eval ? Images{} : load_split(options_.data_dir, Split::kTest);
  const int64_t batch = cohort_examples::per_rank_batch(options_.batch_size, *workers_);
  cohort::DistributedSamplerOptions sampling;
  sampling.seed = options_.seed;
  sampling.drop_last = true;
  cohort::DistributedSampler sampler(static_cast<size_t>(train_set.data().size()), *workers_,
                                     sampling);
  const int64_t steps_per_epoch = static_cast<int64_t>(sampler.num_samples()) / batch;
  auto loader = torch::data::make_data_loader(
      std::move(train_set), sampler, torch::data::DataLoaderOptions(batch).drop_last(true));
  progress_ = std::make_unique<cohort_examples::Progress>(
      options_.progress && workers_->rank() == 0, options_.log_every);
  if (!options_.metrics.empty() && workers_->rank() == 0) {
    metrics_ = std::make_unique<cohort_examples::MetricsFile>(options_.metrics);
  }
  steps_ = steps_done_before();
  if (steps_ > 0 && workers_->rank() == 0) {
    std::printf("resumed from the servers' checkpoints at step %lld\n", (long long)steps_);
  }
  torch::manual_seed(options_.seed + static_cast<uint64_t>(group_->rank()));  // dropout
  model_->train();
  start_ = Clock::now();
  for (int64_t epoch = steps_ / steps_per_epoch; epoch < options_.epochs && !out_of_budget();
       ++epoch) {
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    const int64_t skip = epoch == steps_ / steps_per_epoch ? steps_ % steps_per_epoch : 0;
    train_epoch(*loader, epoch, steps_per_epoch, skip);
  }
  TrainResult result;
  result.steps = steps_;
  finish_figures(test, result);
  return result;
}

// After the last step: every worker gets the final parameters; the job's samples over the
// longest time a worker trained, and the test accuracy, reported by the first worker. A worker
// that died, or stays stopped past the group's timeout, breaks the workers' group: each
// survivor then reports its own figures (issue 35: the job ended with rc 0 and no final line).
void PsTrainer::finish_figures(const Images& test, TrainResult& result) {
  const double own_s = seconds_since(start_);
  ps_->finish();
  double samples = static_cast<double>(samples_);
  double trained_s = own_s;
  result.reports = workers_->rank() == 0;
  result.covers = std::to_string(group_->size()) + " rank(s)";
  bool alone = false;
  try {
    workers_->allreduce(cohort::Buffer{&samples, 1, cohort::DType::kFloat64});
    workers_->allreduce(cohort::Buffer{&trained_s, 1, cohort::DType::kFloat64},
                        {cohort::ReduceOp::kMax});
  } catch (const cohort::PeerError& e) {
    report_alone(e, result);
    alone = true;
  } catch (const cohort::TimeoutError& e) {
    report_alone(e, result);
    alone = true;
  }
  if (alone) {  // a sum that failed half-way means nothing
    samples = static_cast<double>(samples_);
    trained_s = own_s;
  }
  result.samples_per_s = trained_s > 0 ? samples / trained_s : 0;
  if (options_.skip_eval) return;
  model_->eval();
  const auto forward = [&](const torch::Tensor& images) { return model_->forward(images); };
  result.test_accuracy = alone ? evaluate_all(test, forward).accuracy
                               : evaluate_slices(test, *workers_, forward).accuracy;
}

// When the workers' group broke at the end: this worker's own figures, reported by itself.
void PsTrainer::report_alone(const cohort::Error& error, TrainResult& result) const {
  std::printf("worker rank %d: %s; the figures below are this worker's alone\n", group_->rank(),
              error.what());
  result.reports = true;
  result.covers = "worker rank " + std::to_string(group_->rank()) + " alone";
}

void PsTrainer::train_epoch(
    torch::data::StatelessDataLoader<FashionMnist, cohort::DistributedSampler>& loader,
    int64_t epoch, int64_t steps_in_epoch, int64_t skip) {
  double loss_sum = 0;
  int64_t steps = 0;
  const Clock::time_point epoch_start = Clock::now();
  progress_->start_epoch(epoch + 1, options_.epochs, steps_in_epoch - skip);
  for (auto it = loader.begin(); it != loader.end() && !out_of_budget(); ++it) {
    if (skip > 0) {  // done before the restart
      --skip;
      continue;
    }
    const Clock::time_point compute_start = Clock::now();
    model_->zero_grad();
    const torch::Tensor loss = torch::nll_loss(model_->forward(it->data), it->target);
    loss.backward();
    slow_.after_compute(Clock::now() - compute_start);
    const Clock::time_point push_start = Clock::now();
    ps_->push();
    const double loss_value = loss.item<double>();  // while the gradients travel
    loss_sum += loss_value;
    samples_ += it->data.size(0);
    ++steps;
    ++steps_;
    progress_->update(steps, it->data.size(0), loss_value);
    const Clock::time_point wait_start = Clock::now();
    ps_->wait_for_parameters();
    if (metrics_) {
      cohort_examples::StepRecord r;
      r.epoch = epoch + 1;
      r.step = steps_;
      r.samples = options_.batch_size;
      r.loss = loss_value;
      r.lr = options_.scaled_lr();
      r.backward_ms = ms_between(compute_start, push_start);  // forward, backward, slow-down
      r.exposed_comm_ms = ms_between(wait_start, Clock::now());
      r.step_ms = ms_between(compute_start, Clock::now());
      metrics_->write(r);
    }
  }
  progress_->finish_epoch();
  if (workers_->rank() == 0 && steps > 0) {
    std::printf(
        "epoch %lld/%lld (worker rank %d): %lld steps, train loss %.4f, %.1f steps/s, "
        "parameters at version %lld\n",
        (long long)epoch + 1, (long long)options_.epochs, group_->rank(), (long long)steps,
        loss_sum / double(steps), double(steps) / seconds_since(epoch_start),
        (long long)ps_->parameter_version());
    std::fflush(stdout);
  }
}

}  // namespace

TrainResult train_with_parameter_server(const TrainOptions& options,
                                        std::shared_ptr<cohort::Group> group) {
  return PsTrainer(options, std::move(group)).run();
}

}  // namespace fashion_mnist
