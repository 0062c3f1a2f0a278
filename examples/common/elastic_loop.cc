#include "elastic_loop.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "checkpointing.h"
#include "cohort/core/error.h"
#include "sample_log.h"
#include "step_metrics.h"

namespace cohort_examples {

void add_elastic_flags(CLI::App& app, bool& elastic, std::string& sample_log) {
  auto* flag = app.add_flag("--elastic", elastic,
                            "Keep training when ranks die or join (run under cohortrun "
                            "--min-ranks; docs/elastic.md)");
  app.add_option("--sample-log", sample_log,
                 "A directory where each rank logs the samples of each committed step (what "
                 "bench/chaos.sh checks)")
      ->needs(flag);
}

void refuse_for_elastic(bool set, const std::string& what) {
  if (!set) return;
  throw cohort::InvalidArgument("--elastic does not take " + what +
                                " (docs/elastic.md, \"The examples' --elastic\")");
}

void refuse_stateful_hook(const CommHookSettings& hook) {
  if (!comm_hook_keeps_state(hook.name)) return;
  std::string stateless;
  for (const std::string& name : comm_hook_names()) {
    if (name != "allreduce" && !comm_hook_keeps_state(name)) {
      stateless += (stateless.empty() ? "" : ", ") + name;
    }
  }
  refuse_for_elastic(true, "--comm-hook " + hook.name +
                               ": the hook keeps state between steps that a new member would "
                               "not have; take one of " +
                               stateless);
}

int64_t elastic_planned_steps(int64_t epochs, int64_t max_steps, int64_t dataset_size,
                              int64_t global_batch) {
  const int64_t per_epoch = (dataset_size + global_batch - 1) / global_batch;
  const int64_t all = epochs * per_epoch;
  return max_steps > 0 ? std::min(all, max_steps) : all;
}

cohort::ElasticTrainerOptions elastic_trainer_options(const ElasticRunSettings& settings) {
  cohort::ElasticTrainerOptions options;
  options.sampler.global_batch = static_cast<size_t>(settings.global_batch);
  options.sampler.seed = settings.seed;
  cohort::train_elastic_as(options, settings.strategy, settings.wrapping);
  options.checkpoint_dir = elastic_checkpoint_dir(settings.checkpoint);
  options.checkpoint_every = settings.checkpoint_every;
  options.resume = settings.resume;
  options.lr_schedule = settings.lr_schedule;
  return options;
}

std::string elastic_checkpoint_dir(const std::string& checkpoint) {
  return checkpoint.empty() ? "" : checkpoint + ".elastic";
}

void report_memberships(cohort::ElasticTrainer& trainer,
                        std::function<void(const cohort::Membership&)> also) {
  trainer.on_membership_change([&trainer, also = std::move(also)](const cohort::Membership& m) {
    if (also) also(m);
    if (m.rank != 0) return;
    std::printf("membership: %s (in %.2f s)\n", m.describe().c_str(),
                trainer.last_change_seconds());
    std::fflush(stdout);
  });
}

namespace {

// The --metrics file of an elastic run: opened by whichever member is rank 0 when a step
// commits; the first generation's starts it afresh, a later one (its rank 0 died) appends.
class ElasticMetrics {
 public:
  explicit ElasticMetrics(std::string path) : path_(std::move(path)) {}

  void write(const cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings, double loss,
             double lr, double step_ms) {
    const cohort::Membership& m = trainer.membership();
    if (path_.empty() || m.rank != 0) return;
    if (!file_) file_ = std::make_unique<MetricsFile>(path_, /*append=*/m.generation > 1);
    StepRecord r;
    r.epoch = static_cast<int64_t>(trainer.epoch()) + 1;
    r.step = trainer.committed_steps();
    r.samples = settings.global_batch;
    r.loss = loss;
    r.lr = lr;
    r.step_ms = step_ms;
    r.world_size = m.size;
    r.generation = m.generation;
    file_->write(r);
  }

 private:
  std::string path_;
  std::unique_ptr<MetricsFile> file_;
};

// Rank 0 says where it resumed, and each checkpoint it wrote.
void say_resumed(const cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings) {
  if (trainer.membership().rank != 0 || trainer.committed_steps() == 0) return;
  std::printf("resumed from %s at step %lld\n", elastic_checkpoint_dir(settings.checkpoint).c_str(),
              (long long)trainer.committed_steps());
}

void say_saved(const cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings) {
  const cohort::Membership& m = trainer.membership();
  if (m.rank != 0) return;
  std::printf("checkpoint of step %lld written to %s (generation %llu, %d ranks)\n",
              (long long)trainer.committed_steps(),
              elastic_checkpoint_dir(settings.checkpoint).c_str(), (unsigned long long)m.generation,
              m.size);
  std::fflush(stdout);
}

}  // namespace

ElasticRunTime run_elastic_steps(
    cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings,
    const std::function<torch::Tensor(const cohort::ElasticStep&)>& loss_of,
    const ElasticStepHooks& hooks, const std::function<void(cohort::Group&)>& evaluate) {
  const auto start = std::chrono::steady_clock::now();
  ElasticMetrics metrics(settings.metrics);
  SampleLog sample_log(settings.sample_log);
  say_resumed(trainer, settings);
  double last_loss = 0;
  while (static_cast<int64_t>(trainer.epoch()) < settings.epochs &&
         (settings.max_steps < 0 || trainer.committed_steps() < settings.max_steps)) {
    const auto step_start = std::chrono::steady_clock::now();
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      sample_log.hold(step);
      torch::Tensor loss;
      {
        const auto autocast = trainer.forward_scope();  // --precision bf16
        loss = loss_of(step);
      }
      loss.backward();
      if (hooks.after_backward) hooks.after_backward();
      last_loss = loss.item<double>();
    });
    if (!committed) continue;
    sample_log.write_held();
    if (hooks.after_commit) hooks.after_commit();
    // The schedule's LR of the step just taken: the trainer set it before the step.
    const double lr = trainer.optimizer().param_groups()[0].options().get_lr();
    metrics.write(
        trainer, settings, last_loss, lr,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start)
            .count());
    const int64_t done = trainer.committed_steps();
    if (trainer.membership().rank == 0 && done % settings.log_every == 0) {
      std::printf("step %lld loss %.4f on %d rank(s)\n", (long long)done, last_loss,
                  trainer.membership().size);
      std::fflush(stdout);
    }
    const bool saved =
        !settings.checkpoint.empty() && checkpoint_due(settings.checkpoint_every, done);
    if (saved) say_saved(trainer, settings);  // the trainer wrote it with the commit
  }
  ElasticRunTime run;
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.trained_steps = trainer.committed_steps();
  // DiLoCo's last synchronization (the members' models differ since the previous one), the
  // last checkpoint and the evaluation, finished by the survivors if a member is lost.
  const int64_t saved_before = trainer.checkpoint_step();
  cohort::ElasticFinish end;
  end.evaluate = evaluate;
  trainer.finish(end);
  if (trainer.checkpoint_step() != saved_before) say_saved(trainer, settings);
  return run;
}

}  // namespace cohort_examples
