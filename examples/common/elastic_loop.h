// What both examples' --elastic trainers share (docs/elastic.md): the options they refuse, the
// ElasticTrainer's options, the membership lines, and the loop of steps with its progress lines.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "checkpointing.h"
#include "cohort/torch/elastic/elastic_trainer.h"

namespace cohort_examples {

struct ElasticRunSettings {
  int64_t epochs = 1;
  int64_t max_steps = -1;  // -1: no limit
  int64_t log_every = 100;
  int64_t global_batch = 64;
  uint64_t seed = 0;
  double bucket_cap_mb = 25.0;
  // --metrics: one record per committed step, written by the rank 0 of its generation (a new
  // rank 0 appends), with the step's world size and generation (step_metrics.h).
  std::string metrics;
  // --checkpoint (under --elastic the directory <checkpoint>.elastic: elastic_checkpoint_dir),
  // --checkpoint-every, and --resume / --overwrite-checkpoint as LoadOptions (load_options).
  std::string checkpoint;
  int64_t checkpoint_every = 0;
  cohort::LoadOptions resume;
  // --diloco H (and its other options): ElasticStrategy::kDiLoCo instead of DDP.
  std::optional<cohort::DiLoCoOptions> diloco;
};

// The settings from an example's TrainOptions (both examples name these fields alike).
template <typename TrainOptions>
ElasticRunSettings elastic_run_settings(const TrainOptions& o) {
  ElasticRunSettings run;
  run.epochs = o.epochs;
  run.max_steps = o.max_steps;
  run.log_every = o.log_every;
  run.global_batch = o.batch_size;
  run.seed = o.seed;
  run.bucket_cap_mb = o.plan.bucket_cap.mebibytes;
  run.metrics = o.metrics;
  run.checkpoint = o.checkpoint;
  run.checkpoint_every = o.checkpoint_every;
  run.resume = load_options(o.resume, o.overwrite_checkpoint);
  if (o.diloco.enabled()) run.diloco = o.diloco.options();
  return run;
}

// Where --elastic keeps the checkpoint named `checkpoint` ("" for none): a directory, since
// ElasticTrainer writes the sampler's place beside the model (docs/elastic.md, "Checkpoints").
std::string elastic_checkpoint_dir(const std::string& checkpoint);

// Throws cohort::InvalidArgument naming `what` when `set`: an option --elastic does not take.
void refuse_for_elastic(bool set, const char* what);

// The global batch kept (each rank's share grows when members leave), DDP's bucket size, or
// DiLoCo.
cohort::ElasticTrainerOptions elastic_trainer_options(const ElasticRunSettings& settings);

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
// checkpoint every checkpoint_every steps and at the end (saying so on rank 0, with the
// generation and world size). Under DiLoCo every member ends with the outer parameters (a last
// synchronization), for the evaluation. Returns the wall time in seconds.
double run_elastic_steps(cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings,
                         const std::function<torch::Tensor(const cohort::ElasticStep&)>& loss_of,
                         const ElasticStepHooks& hooks = {});

}  // namespace cohort_examples
