#include "trainer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "auto_plan.h"
#include "checkpointing.h"
#include "cohort/comm/straggler.h"
#include "cohort/comm/timeline.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "cohort/torch/tensor_memory.h"
#include "dataset.h"
#include "evaluation.h"
#include "fmnist_models.h"
#include "memory.h"
#include "optimizers.h"
#include "precision.h"
#include "progress.h"
#include "ps_trainer.h"
#include "ranks.h"
#include "step_metrics.h"
#include "strategy.h"
#include "timed_step.h"

namespace fashion_mnist {

namespace {

using Clock = std::chrono::steady_clock;
using cohort::trace;
using cohort_examples::EpochSummary;
using cohort_examples::MetricsFile;
using cohort_examples::Progress;
using cohort_examples::StepRecord;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class Trainer {
 public:
  Trainer(const TrainOptions& options, std::shared_ptr<cohort::Group> group);
  TrainResult run();

 private:
  using Loader = decltype(torch::data::make_data_loader(
      std::declval<FashionMnist>(), std::declval<cohort::DistributedSampler>(),
      std::declval<torch::data::DataLoaderOptions>()));

  std::vector<StepRecord> train_epoch();
  StepRecord train_step(torch::data::Example<>& batch, double data_ms);
  void convert_batch_norms();
  std::optional<cohort::RunPlan> plan_configuration(const cohort::StrategyOptions& wrapping,
                                                    const FashionMnist& train_set);
  Evaluation evaluate();
  void report_epoch(const std::vector<StepRecord>& steps, const std::optional<Evaluation>& eval);
  void report_step_times();
  int64_t planned_steps() const;
  bool out_of_steps() const {
    return out_of_time_ || (options_.max_steps > 0 && state_.step >= options_.max_steps);
  }
  void check_time_limit();
  bool rank0() const { return group_->rank() == 0; }

  TrainOptions options_;
  std::shared_ptr<cohort::Group> group_;
  cohort::PrecisionOptions precision_;  // before the data: a bad --precision fails first
  std::shared_ptr<cohort::Timeline> timeline_ = cohort::Timeline::from_env();
  Images test_;
  std::shared_ptr<FmnistModel> model_;
  std::optional<cohort::RunPlan> plan_;  // --strategy / --bucket-cap-mb auto
  std::unique_ptr<cohort::Strategy> strategy_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<cohort::DistributedSampler> sampler_;
  std::unique_ptr<cohort::optim::WarmupDecayLR> scheduler_;  // after the sampler: needs its size
  Loader loader_;
  cohort::TrainingState state_;
  std::unique_ptr<MetricsFile> metrics_;
  Progress progress_;
  int64_t samples_run_ = 0;
  double ms_run_ = 0;
  // --time-limit, COHORT_SLOW_RANKS and the per-rank step-time report (docs/async.md).
  Clock::time_point started_ = Clock::now();
  bool out_of_time_ = false;
  cohort::SlowDown slow_ = cohort::SlowDown::from_env(group_->rank());
  cohort::StepTimes step_times_;
};

int64_t per_rank_batch(const TrainOptions& options, const cohort::Group& group) {
  return cohort_examples::per_rank_batch(options.batch_size, group);
}

Trainer::Trainer(const TrainOptions& options, std::shared_ptr<cohort::Group> group)
    : options_(options),
      group_(std::move(group)),
      precision_(cohort_examples::checked_precision(options_.precision, options_.master_weights)),
      test_(options.skip_eval ? Images{} : load_split(options.data_dir, Split::kTest)),
      loader_(nullptr),
      progress_(options.progress && group_->rank() == 0, options.log_every) {
  cohort::track_cpu_tensor_memory();  // the peak tensors of the memory lines
  torch::set_num_threads(cohort_examples::threads_per_rank(options_.threads, *group_));
  FashionMnist train_set(load_split(options_.data_dir, Split::kTrain));
  torch::manual_seed(options_.seed);  // the same initial weights everywhere (DDP checks)
  cohort_examples::mark_memory_before_model();
  model_ = make_fmnist_model(options_.model);
  if (options_.sync_bn) convert_batch_norms();
  if (options_.activation_checkpointing) checkpoint_conv_stack(*model_, options_, rank0());
  cohort::StrategyOptions wrapping =
      cohort_examples::strategy_options(options_, TrainOptions::kFsdpMinUnitParameters, timeline_);
  std::string strategy = options_.strategy;
  plan_ = plan_configuration(wrapping, train_set);
  if (plan_) {
    strategy = cohort::strategy_name(plan_->strategy);
    wrapping = plan_->applied(wrapping);
  }
  strategy_ =
      cohort::make_strategy(cohort_examples::strategy_kind(strategy), model_, group_, wrapping);
  torch::manual_seed(options_.seed + static_cast<uint64_t>(group_->rank()));  // dropout
  // The scaled LR is the scheduler's base LR.
  cohort_examples::OptimizerSettings settings = options_.optimizer_settings(model_.get());
  settings.norm_reduction = strategy_->norm_reduction();
  optimizer_ = cohort_examples::make_optimizer(options_.optimizer,
                                               strategy_->optimizer_parameters(), settings);
  cohort::DistributedSamplerOptions sampling;
  sampling.seed = options_.seed;
  sampling.drop_last = true;
  sampler_ = std::make_unique<cohort::DistributedSampler>(
      static_cast<size_t>(train_set.data().size()), *group_, sampling);
  loader_ = torch::data::make_data_loader(
      std::move(train_set), *sampler_,
      torch::data::DataLoaderOptions(per_rank_batch(options_, *group_)).drop_last(true));
  scheduler_ = std::make_unique<cohort::optim::WarmupDecayLR>(
      *optimizer_, options_.lr_schedule_options(planned_steps()));
  state_.module = model_.get();
  state_.optimizer = optimizer_.get();
  state_.sampler = sampler_.get();
  state_.lr_scheduler = scheduler_.get();
  if (!options_.metrics.empty() && rank0())
    metrics_ = std::make_unique<MetricsFile>(options_.metrics);
}

// What a decaying schedule decays over: the whole run, or up to --max-steps.
int64_t Trainer::planned_steps() const {
  const int64_t per_epoch =
      static_cast<int64_t>(sampler_->num_samples()) / per_rank_batch(options_, *group_);
  const int64_t all = options_.epochs * per_epoch;
  return options_.max_steps > 0 ? std::min(all, options_.max_steps) : all;
}

// --sync-bn: before the strategy wraps the model and the optimizer is built over it.
// --strategy auto or --bucket-cap-mb auto: the planner times one training step of a probe copy
// of the model on this rank's first batch (the model itself stays as it is; the seed is set
// again for dropout after this) and chooses. Collective.
std::optional<cohort::RunPlan> Trainer::plan_configuration(const cohort::StrategyOptions& wrapping,
                                                           const FashionMnist& train_set) {
  if (!cohort_examples::wants_plan(options_.strategy, options_.plan)) return std::nullopt;
  cohort::RunPlanRequest request =
      cohort_examples::plan_request(options_.strategy, options_.plan, wrapping, options_.comm_hook);
  request.optimizer_state_per_element =
      cohort_examples::optimizer_state_per_element(options_.optimizer, options_.momentum);
  auto probe = make_fmnist_model(options_.model);
  if (options_.activation_checkpointing) checkpoint_conv_stack(*probe, options_, false);
  const auto count = std::min<int64_t>(per_rank_batch(options_, *group_), train_set.data().size());
  const auto images = train_set.data().images.narrow(0, 0, count);
  const auto labels = train_set.data().labels.narrow(0, 0, count);
  request.probe = probe;
  request.probe_loss = [&] {  // under the run's autocast, as the training step's forward
    const auto autocast = cohort::forward_scope(precision_);
    return torch::nll_loss(probe->forward(images), labels);
  };
  request.probe_optimizer = [&](const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
    return cohort_examples::make_optimizer(options_.optimizer, tensors,
                                           options_.optimizer_settings(probe.get()));
  };
  return cohort::plan_run(*group_, *model_, request);
}

void Trainer::convert_batch_norms() {
  cohort::nn::convert_sync_batchnorm(model_, group_);
  int converted = 0;
  for (const auto& module : model_->modules())
    converted += std::dynamic_pointer_cast<cohort::nn::SyncBatchNormImpl>(module) != nullptr;
  if (converted == 0) {
    throw cohort::InvalidArgument("--sync-bn: the model '" + options_.model +
                                  "' has no BatchNorm to synchronize; use --model cnn_bn");
  }
}

// Every rank stops at the same step: the ranks agree with one tiny allreduce per step, only
// when a limit is set.
void Trainer::check_time_limit() {
  if (options_.time_limit_s <= 0) return;
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - started_).count();
  int32_t over = elapsed_s >= options_.time_limit_s ? 1 : 0;
  group_->allreduce(cohort::Buffer{&over, 1, cohort::DType::kInt32}, {cohort::ReduceOp::kMax});
  out_of_time_ = over != 0;
}

TrainResult Trainer::run() {
  cohort_examples::resume_from_checkpoint(
      options_.checkpoint,
      cohort_examples::load_options(options_.resume, options_.overwrite_checkpoint), *strategy_,
      state_);
  started_ = Clock::now();
  TrainResult result;
  for (; state_.epoch < options_.epochs && !out_of_steps(); ++state_.epoch) {
    if (sampler_->epoch() != static_cast<uint64_t>(state_.epoch)) sampler_->set_epoch(state_.epoch);
    cohort_examples::start_counting_step_memory();
    const std::vector<StepRecord> steps = train_epoch();
    cohort_examples::stop_counting_step_memory();
    strategy_->synchronize(*optimizer_);
    std::optional<Evaluation> eval;
    if (!options_.skip_eval) eval = evaluate();
    if (eval) result.test_accuracy = eval->accuracy;
    report_epoch(steps, eval);
    report_step_times();
    cohort_examples::print_memory_of_ranks(*strategy_, *optimizer_, *group_);
    cohort_examples::save_epoch_checkpoint(options_.checkpoint, *strategy_, state_, *sampler_,
                                           !out_of_steps());
  }
  cohort_examples::finish_checkpoints(*strategy_);
  if (timeline_) timeline_->write(*group_);
  result.samples_per_s = ms_run_ > 0 ? double(samples_run_) / (ms_run_ / 1000.0) : 0;
  result.steps = state_.step;
  result.reports = rank0();
  result.covers = std::to_string(group_->size()) + " rank(s)";
  return result;
}

std::vector<StepRecord> Trainer::train_epoch() {
  std::vector<StepRecord> records;
  const int64_t steps = static_cast<int64_t>(sampler_->num_samples() - sampler_->position()) /
                        per_rank_batch(options_, *group_);
  progress_.start_epoch(state_.epoch + 1, options_.epochs, steps);
  model_->train();
  Clock::time_point fetch = Clock::now();
  for (auto it = loader_->begin(); it != loader_->end() && !out_of_steps();) {
    const double data_ms = ms_since(fetch);
    records.push_back(train_step(*it, data_ms));
    if (plan_) {
      cohort_examples::correct_plan(*group_, *plan_, records.back(), *strategy_);
    }
    if (cohort_examples::checkpoint_due(options_.checkpoint_every, state_.step)) {
      cohort_examples::save_epoch_checkpoint(options_.checkpoint, *strategy_, state_, *sampler_,
                                             /*epoch_finished=*/false);
    }
    progress_.update(static_cast<int64_t>(records.size()), records.back().samples,
                     records.back().loss);
    fetch = Clock::now();
    ++it;
  }
  progress_.finish_epoch();
  return records;
}

StepRecord Trainer::train_step(torch::data::Example<>& batch, double data_ms) {
  cohort_examples::StepCalls calls;
  calls.loss = [&] {
    const auto autocast = strategy_->forward_scope();
    return torch::nll_loss(model_->forward(batch.data), batch.target);
  };
  calls.after_backward = [&](double elapsed_ms) {  // COHORT_SLOW_RANKS: a slower rank's compute
    slow_.after_compute(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(elapsed_ms)));
  };
  calls.after_update = [&] {
    scheduler_->step();  // the next step's LR
    check_time_limit();  // its wait for a slow rank is part of the step
  };
  StepRecord r = cohort_examples::timed_step(*strategy_, *optimizer_, timeline_.get(),
                                             state_.step + 1, data_ms, calls);
  step_times_.add(r.forward_ms + r.backward_ms);
  r.epoch = state_.epoch + 1;
  r.step = ++state_.step;
  r.samples = options_.batch_size;
  if (metrics_) metrics_->write(r);
  samples_run_ += r.samples;
  ms_run_ += r.step_ms;
  return r;
}

// The slices may take different numbers of forwards, so a sharded model is gathered whole
// first.
Evaluation Trainer::evaluate() {
  auto span = trace(timeline_.get(), "evaluate");
  const auto whole = strategy_->whole_parameters();
  model_->eval();
  const Evaluation result = evaluate_slices(test_, *group_, [&](const torch::Tensor& images) {
    const auto autocast = strategy_->forward_scope();
    return model_->forward(images).to(torch::kFloat32);
  });
  model_->train();
  return result;
}

void Trainer::report_epoch(const std::vector<StepRecord>& steps,
                           const std::optional<Evaluation>& eval) {
  if (!rank0()) return;
  if (plan_)
    cohort_examples::log_plan_accuracy(*plan_, steps, state_.epoch + 1,
                                       cohort_examples::training_peak_bytes());
  const EpochSummary s = cohort_examples::summarize(steps);
  std::printf("epoch %lld/%lld: %lld steps, train loss %.4f", (long long)state_.epoch + 1,
              (long long)options_.epochs, (long long)s.steps, s.mean_loss);
  if (eval) std::printf(", test loss %.4f, test accuracy %.2f%%", eval->loss, 100 * eval->accuracy);
  std::printf("\n");
  cohort_examples::print_epoch_timing(s, group_->size());
  std::fflush(stdout);
}

// Collective: which rank computes slowest (a straggler holds every step of every rank back).
void Trainer::report_step_times() {
  const cohort::StepTimes::Report report = step_times_.report(*group_);
  if (rank0() && group_->size() > 1) {
    std::printf("%s\n", report.describe().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

// Options of the parameter-server modes given to --mode sync.
void refuse_parameter_server_options(const TrainOptions& o) {
  auto refuse = [](bool given, const char* what) {
    if (given) {
      throw cohort::InvalidArgument(std::string(what) +
                                    " is for --mode ps or ssp (docs/async.md), not --mode sync");
    }
  };
  refuse(o.staleness != 0, "--staleness");
  refuse(o.servers != 1, "--servers");
  refuse(o.backup_workers != 0, "--backup-workers");
  refuse(o.staleness_lr_scaling, "--staleness-lr-scaling");
  refuse(o.hybrid, "--hybrid");
}

TrainResult train(const TrainOptions& options, std::shared_ptr<cohort::Group> group) {
  if (options.mode != "sync") return train_with_parameter_server(options, std::move(group));
  refuse_parameter_server_options(options);
  return Trainer(options, std::move(group)).run();
}

}  // namespace fashion_mnist
