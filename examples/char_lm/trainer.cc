#include "trainer.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <optional>
#include <vector>

#include "adamw.h"
#include "auto_plan.h"
#include "checkpointing.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/optim/lr_schedule.h"
#include "cohort/torch/tensor_memory.h"
#include "dataset.h"
#include "gpt.h"
#include "memory.h"
#include "next_char_loss.h"
#include "precision.h"
#include "progress.h"
#include "ranks.h"
#include "sample.h"
#include "step_metrics.h"
#include "strategy.h"
#include "timed_step.h"
#include "validation.h"

namespace char_lm {

namespace {

using Clock = std::chrono::steady_clock;
using cohort::trace;
using cohort_examples::MetricsFile;
using cohort_examples::StepRecord;

// Windows per evaluation forward.

using LossReduction = torch::nn::functional::CrossEntropyFuncOptions::reduction_t;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

class Trainer {
 public:
  Trainer(const TrainOptions& options, std::shared_ptr<cohort::Group> group);
  TrainResult run();

 private:
  using Loader = decltype(torch::data::make_data_loader(
      std::declval<TextWindows>(), std::declval<cohort::DistributedSampler>(),
      std::declval<torch::data::DataLoaderOptions>()));

  std::optional<cohort::RunPlan> plan_configuration(const cohort::StrategyOptions& wrapping);
  void build_optimizer();
  void build_loader();
  void describe() const;
  std::vector<StepRecord> train_epoch();
  StepRecord train_step(torch::data::Example<>& batch, double data_ms);
  torch::Tensor loss_of(const torch::data::Example<>& batch, LossReduction reduction);
  double evaluate();
  void report_epoch(const std::vector<StepRecord>& steps, const std::optional<double>& validation);
  int64_t steps_per_epoch() const;
  int64_t planned_steps() const;
  bool out_of_steps() const { return options_.max_steps > 0 && state_.step >= options_.max_steps; }
  bool rank0() const { return group_->rank() == 0; }

  TrainOptions options_;
  std::shared_ptr<cohort::Group> group_;
  cohort::PrecisionOptions precision_;
  std::shared_ptr<cohort::Timeline> timeline_ = cohort::Timeline::from_env();
  CharData data_;
  TextWindows validation_;
  int64_t per_rank_batch_;
  Gpt model_{nullptr};
  std::string strategy_name_;            // --strategy, or the planner's choice
  std::optional<cohort::RunPlan> plan_;  // --strategy / --bucket-cap-mb auto
  std::unique_ptr<cohort::Strategy> strategy_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // AdamW or Lamb (--optimizer)
  std::unique_ptr<cohort::DistributedSampler> sampler_;
  std::unique_ptr<cohort::optim::WarmupDecayLR> scheduler_;  // after the sampler: needs its size
  Loader loader_;
  cohort::TrainingState state_;
  std::unique_ptr<MetricsFile> metrics_;
  cohort_examples::Progress progress_;
  int64_t samples_run_ = 0;
  double ms_run_ = 0;
};

Trainer::Trainer(const TrainOptions& options, std::shared_ptr<cohort::Group> group)
    : options_(options),
      group_(std::move(group)),
      precision_(cohort_examples::checked_precision(options_.precision, options_.master_weights)),
      data_(load_char_data(options_.data_dir, options_.context)),
      validation_(data_.validation, options_.context),
      per_rank_batch_(cohort_examples::per_rank_batch(options_.batch_size, *group_)),
      loader_(nullptr),
      progress_(options_.progress && group_->rank() == 0, options_.log_every) {
  cohort::track_cpu_tensor_memory();  // the peak tensors of the memory lines
  torch::set_num_threads(cohort_examples::threads_per_rank(options_.threads, *group_));
  torch::manual_seed(options_.seed);  // the same initial weights everywhere (DDP checks)
  cohort_examples::mark_memory_before_model();
  model_ = Gpt(options_.model_config(data_.vocabulary.size()));
  if (options_.activation_checkpointing) checkpoint_blocks(*model_, rank0());
  cohort::StrategyOptions wrapping = cohort_examples::strategy_options(options_, 0, timeline_);
  strategy_name_ = options_.strategy;
  plan_ = plan_configuration(wrapping);
  if (plan_) {
    strategy_name_ = cohort::strategy_name(plan_->strategy);
    wrapping = plan_->applied(wrapping);
  }
  strategy_ = cohort::make_strategy(cohort_examples::strategy_kind(strategy_name_), model_, group_,
                                    wrapping);
  torch::manual_seed(options_.seed + static_cast<uint64_t>(group_->rank()));  // dropout
  build_optimizer();
  build_loader();
  scheduler_ = std::make_unique<cohort::optim::WarmupDecayLR>(
      *optimizer_, options_.lr_schedule_options(planned_steps()));
  state_.module = model_.ptr().get();
  state_.optimizer = optimizer_.get();
  state_.sampler = sampler_.get();
  state_.lr_scheduler = scheduler_.get();
  if (!options_.metrics.empty() && rank0())
    metrics_ = std::make_unique<MetricsFile>(options_.metrics);
}

// --strategy auto or --bucket-cap-mb auto: the planner times one training step of a probe copy
// of the model on this rank's first batch (the model itself stays as it is; the seed is set
// again for dropout after this) and chooses. Collective.
std::optional<cohort::RunPlan> Trainer::plan_configuration(
    const cohort::StrategyOptions& wrapping) {
  if (!cohort_examples::wants_plan(options_.strategy, options_.plan)) return std::nullopt;
  cohort::RunPlanRequest request =
      cohort_examples::plan_request(options_.strategy, options_.plan, wrapping, options_.comm_hook);
  request.optimizer_state_per_element = cohort::kAdamStateBytes;  // AdamW and Lamb
  Gpt probe(options_.model_config(data_.vocabulary.size()));
  if (options_.activation_checkpointing) checkpoint_blocks(*probe, false);  // as the model
  TextWindows windows(data_.train, options_.context);
  std::vector<size_t> first(static_cast<size_t>(per_rank_batch_));
  std::iota(first.begin(), first.end(), size_t{0});
  const auto batch = windows.get_batch(first);
  request.probe = probe.ptr();
  request.probe_loss = [&] {  // under the run's autocast: bfloat16 halves the compute here
    const auto autocast = cohort::forward_scope(precision_);
    return next_char_loss(probe, batch);
  };
  request.probe_optimizer = [&](const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
    return make_adamw(*probe, tensors, options_);
  };
  return cohort::plan_run(*group_, *model_, request);
}

void Trainer::build_optimizer() {
  optimizer_ = make_adamw(*model_, strategy_->optimizer_parameters(), options_);
}

// Each rank gets a disjoint, shuffled shard of the training windows every epoch; the tail that
// does not fill a batch on every rank is dropped, so all ranks run the same steps.
void Trainer::build_loader() {
  TextWindows train_set(data_.train, options_.context);
  cohort::DistributedSamplerOptions sampling;
  sampling.seed = options_.seed;
  sampling.drop_last = true;
  sampler_ =
      std::make_unique<cohort::DistributedSampler>(train_set.size().value(), *group_, sampling);
  loader_ = torch::data::make_data_loader(
      std::move(train_set), *sampler_,
      torch::data::DataLoaderOptions(static_cast<size_t>(per_rank_batch_)).drop_last(true));
}

void Trainer::describe() const {
  if (!rank0()) return;
  const GptConfig& c = model_->config();
  std::printf(
      "char_lm: %lld training and %lld validation characters, %lld distinct; unigram baseline "
      "%.4f nats/char\n  model: %lld layers, width %lld, %lld heads, context %lld: %lld "
      "parameters; strategy %s, precision %s, on %d rank(s), global batch %lld windows\n",
      (long long)data_.train.numel(), (long long)data_.validation.numel(),
      (long long)data_.vocabulary.size(), data_.unigram_entropy, (long long)c.layers,
      (long long)c.width, (long long)c.heads, (long long)c.context,
      (long long)count_parameters(*model_), strategy_name_.c_str(),
      (options_.precision + (options_.master_weights ? " with float32 master weights" : ""))
          .c_str(),
      group_->size(), (long long)options_.batch_size);
  std::fflush(stdout);
}

int64_t Trainer::steps_per_epoch() const {
  return static_cast<int64_t>(sampler_->num_samples()) / per_rank_batch_;
}

// What the learning-rate schedule decays over: the whole run, or up to --max-steps.
int64_t Trainer::planned_steps() const {
  const int64_t all = options_.epochs * steps_per_epoch();
  return options_.max_steps > 0 ? std::min(all, options_.max_steps) : all;
}

TrainResult Trainer::run() {
  describe();
  cohort_examples::resume_from_checkpoint(
      options_.checkpoint,
      cohort_examples::load_options(options_.resume, options_.overwrite_checkpoint), *strategy_,
      state_);
  TrainResult result;
  result.unigram_entropy = data_.unigram_entropy;
  for (; state_.epoch < options_.epochs && !out_of_steps(); ++state_.epoch) {
    if (sampler_->epoch() != static_cast<uint64_t>(state_.epoch)) sampler_->set_epoch(state_.epoch);
    cohort_examples::start_counting_step_memory();
    const std::vector<StepRecord> steps = train_epoch();
    cohort_examples::stop_counting_step_memory();
    strategy_->synchronize(*optimizer_);  // local SGD and DiLoCo: every rank evaluates and saves
    std::optional<double> validation;
    if (!options_.skip_eval) validation = evaluate();
    if (validation) result.validation_loss = validation;
    report_epoch(steps, validation);
    cohort_examples::save_epoch_checkpoint(options_.checkpoint, *strategy_, state_, *sampler_,
                                           !out_of_steps());
  }
  cohort_examples::finish_checkpoints(*strategy_);
  if (timeline_) timeline_->write(*group_);
  // Every rank writes it: under a sharded strategy each forward is collective.
  if (options_.sample > 0) {
    result.sample = generate_text(model_, data_.vocabulary, kSamplePrompt, options_.sample,
                                  kSampleTemperature, options_.seed);
  }
  result.samples_per_s = ms_run_ > 0 ? double(samples_run_) / (ms_run_ / 1000.0) : 0;
  result.steps = state_.step;
  return result;
}

std::vector<StepRecord> Trainer::train_epoch() {
  std::vector<StepRecord> records;
  const int64_t steps =
      static_cast<int64_t>(sampler_->num_samples() - sampler_->position()) / per_rank_batch_;
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

// Cross-entropy of the next character at every position of every window.
torch::Tensor Trainer::loss_of(const torch::data::Example<>& batch, LossReduction reduction) {
  torch::Tensor logits;
  {
    const auto autocast = strategy_->forward_scope();
    logits = model_->forward(batch.data);
  }
  return torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), batch.target.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(reduction));
}

StepRecord Trainer::train_step(torch::data::Example<>& batch, double data_ms) {
  cohort_examples::StepCalls calls;
  calls.loss = [&] { return loss_of(batch, torch::kMean); };
  calls.before_update = [&] {
    if (options_.clip > 0) strategy_->clip_gradients(*optimizer_, options_.clip);
  };
  calls.after_update = [&] { scheduler_->step(); };  // the next step's LR
  StepRecord r = cohort_examples::timed_step(*strategy_, *optimizer_, timeline_.get(),
                                             state_.step + 1, data_ms, calls);
  r.epoch = state_.epoch + 1;
  r.step = ++state_.step;
  r.samples = options_.batch_size;
  if (metrics_) metrics_->write(r);
  samples_run_ += r.samples;
  ms_run_ += r.step_ms;
  return r;
}

// Each rank evaluates an equal, contiguous slice of the validation windows (the tail of fewer
// than one window per rank is left out, so every rank runs the same forwards: under a sharded
// strategy a forward is collective); the loss sums are added over the group.
double Trainer::evaluate() {
  auto span = trace(timeline_.get(), "evaluate");
  model_->eval();
  const double loss = validation_loss(*group_, validation_, [&](const torch::data::Example<>& b) {
    return loss_of(b, torch::kSum);
  });
  model_->train();
  return loss;
}

void Trainer::report_epoch(const std::vector<StepRecord>& steps,
                           const std::optional<double>& validation) {
  const cohort_examples::EpochSummary s = cohort_examples::summarize(steps);
  if (plan_ && rank0())
    cohort_examples::log_plan_accuracy(*plan_, steps, state_.epoch + 1,
                                       cohort_examples::training_peak_bytes());
  if (rank0()) {
    std::printf("epoch %lld/%lld: %lld steps, train loss %.4f", (long long)state_.epoch + 1,
                (long long)options_.epochs, (long long)s.steps, s.mean_loss);
    if (validation) std::printf(", validation loss %.4f", *validation);
    std::printf(" nats/char (unigram baseline %.4f)\n", data_.unigram_entropy);
    cohort_examples::print_epoch_timing(s, group_->size());
    std::printf("  %.0f characters/s\n", s.samples_per_s * double(options_.context));
  }
  std::fflush(stdout);
  cohort_examples::print_memory_of_ranks(*strategy_, *optimizer_, *group_);
}

}  // namespace

TrainResult train(const TrainOptions& options, std::shared_ptr<cohort::Group> group) {
  return Trainer(options, std::move(group)).run();
}

}  // namespace char_lm
