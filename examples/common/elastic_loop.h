// What both examples' --elastic trainers share (docs/elastic.md): the options they refuse, the
// ElasticTrainer's options, the membership lines, and the loop of steps with its progress lines.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "checkpointing.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "comm_hooks.h"
#include "strategy.h"

namespace cohort_examples {

struct ElasticRunSettings {
  int64_t epochs = 1;
  int64_t max_steps = -1;  // -1: no limit
  int64_t log_every = 100;
  int64_t global_batch = 64;
  uint64_t seed = 0;
  // --strategy and the options of the strategy layer it takes, as without --elastic
  // (cohort::train_elastic_as refuses by name what the elastic trainer does not do).
  cohort::StrategyKind strategy = cohort::StrategyKind::kDdp;
  cohort::StrategyOptions wrapping;
  // --metrics: one record per committed step, written by the rank 0 of its generation (a new
  // rank 0 appends), with the step's world size and generation (step_metrics.h).
  std::string metrics;
  // --checkpoint (under --elastic the directory <checkpoint>.elastic: elastic_checkpoint_dir),
  // --checkpoint-every, and --resume / --overwrite-checkpoint as LoadOptions (load_options).
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  cohort::LoadOptions resume;
  // --sample-log: a directory where each member logs what it trained in each committed step
  // (sample_log.h); empty: none.
  std::string sample_log;
  // --warmup-steps and the decay: ElasticTrainerOptions::lr_schedule, over the steps the run
  // plans (elastic_planned_steps).
  cohort::optim::LrScheduleOptions lr_schedule;
};

// Steps an elastic run of `epochs` over `dataset_size` samples in global batches of
// `global_batch` takes (an epoch's last step takes what is left), or max_steps when that is
// fewer: what the schedule decays over.
int64_t elastic_planned_steps(int64_t epochs, int64_t max_steps, int64_t dataset_size,
                              int64_t global_batch);

// --comm-hook under --elastic: the hooks that keep state between steps (error feedback, a
// shared random stream, PowerSGD's matrices) would carry it into a generation whose members
// hold other state (a joiner starts empty), so they are refused by name until hooks can be
// told of a new generation; the stateless ones (fp16, bf16, qsgd, terngrad) act as without
// --elastic.
void refuse_stateful_hook(const CommHookSettings& hook);

// --elastic, and --sample-log (ElasticRunSettings::sample_log), which needs it.
void add_elastic_flags(CLI::App& app, bool& elastic, std::string& sample_log);

// Throws cohort::InvalidArgument naming `what` when `set`: an option --elastic does not take.
void refuse_for_elastic(bool set, const std::string& what);

// The global batch kept (each rank's share grows when members leave), the strategy and its
// options (cohort::train_elastic_as), the checkpoints and the schedule.
cohort::ElasticTrainerOptions elastic_trainer_options(const ElasticRunSettings& settings);

// The settings from an example's TrainOptions (both examples name these fields alike), for a
// data set of `dataset_size` samples; FSDP's units as without --elastic (strategy_options).
// Throws cohort::InvalidArgument for what --elastic does not take.
template <typename TrainOptions>
ElasticRunSettings elastic_run_settings(const TrainOptions& o, int64_t dataset_size,
                                        int64_t default_min_unit_parameters) {
  refuse_for_elastic(o.strategy == "auto", "--strategy auto (the planner)");
  refuse_for_elastic(o.plan.bucket_cap.automatic, "--bucket-cap-mb auto");
  refuse_for_elastic(o.plan.memory_budget_mb > 0 || !o.plan.plan_out.empty(),
                     "--memory-budget-mb and --plan-out");
  refuse_stateful_hook(o.comm_hook);
  ElasticRunSettings run;
  run.epochs = o.epochs;
  run.max_steps = o.max_steps;
  run.log_every = o.log_every;
  run.global_batch = o.batch_size;
  run.seed = o.seed;
  run.strategy = strategy_kind(o.strategy);
  run.wrapping = strategy_options(o, default_min_unit_parameters);
  run.metrics = o.metrics;
  run.sample_log = o.sample_log;
  run.checkpoint = o.checkpoint;
  run.checkpoint_every = o.checkpoint_every;
  run.resume = load_options(o.resume, o.overwrite_checkpoint);
  run.lr_schedule = o.lr_schedule_options(
      elastic_planned_steps(o.epochs, o.max_steps, dataset_size, o.batch_size));
  elastic_trainer_options(run);  // refuses now, before the rank joins the job
  return run;
}

// Where --elastic keeps the checkpoint named `checkpoint` ("" for none): a directory, since
// ElasticTrainer writes the sampler's place beside the model (docs/elastic.md, "Checkpoints").
std::string elastic_checkpoint_dir(const std::string& checkpoint);

// Prints every membership on its rank 0 ("membership: generation 2: rank 1 left; ..."), after
// calling `also` (which may be empty) on every member.
void report_memberships(cohort::ElasticTrainer& trainer,
                        std::function<void(const cohort::Membership&)> also = {});

struct ElasticStepHooks {
  std::function<void()> after_backward;  // e.g. clipping (the gradients are reduced already)
  std::function<void()> after_commit;    // e.g. a learning-rate schedule's step
};

// Trains until `settings.epochs` epochs or `max_steps` committed steps: `loss_of` computes this
// rank's loss on its share of each step, which is then backpropagated. Prints "step S loss L on
// W rank(s)" on rank 0 every log_every committed steps, writes settings.metrics, and writes the
// checkpoint every checkpoint_every steps (saying so on rank 0, with the generation and world
// size). Then ends the run with ElasticTrainer::finish (Note [Elastic end]): under DiLoCo a last
// synchronization, the checkpoint, and `evaluate` (collective; may be empty), each redone by
// the survivors when a member is lost. Returns what the training steps took.
struct ElasticRunTime {
  double seconds = 0;         // wall time of the training steps
  int64_t trained_steps = 0;  // committed steps that took samples (not the last synchronization)
};
ElasticRunTime run_elastic_steps(
    cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings,
    const std::function<torch::Tensor(const cohort::ElasticStep&)>& loss_of,
    const ElasticStepHooks& hooks = {}, const std::function<void(cohort::Group&)>& evaluate = {});

}  // namespace cohort_examples
