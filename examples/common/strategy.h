// --strategy of both examples: the library's strategies (cohort/torch/strategy/strategy.h,
// which wraps the model) by name, and "auto", the planner's choice (auto_plan.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "auto_plan.h"
#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/strategy/strategy.h"
#include "comm_hooks.h"
#include "precision.h"

namespace cohort_examples {

// Every cohort::strategy_name; what --strategy takes (those and "auto").
std::vector<std::string> known_strategy_names();
std::vector<std::string> strategy_choices();

// The --strategy help text: the names and what each is.
std::string strategy_help();

// The strategy of that name (not "auto"); throws cohort::InvalidArgument naming the others.
cohort::StrategyKind strategy_kind(const std::string& name);

// The library's StrategyOptions from an example's TrainOptions (both examples name these
// fields alike): precision, buckets, background checkpoints, FSDP's units (cut at
// --fsdp-min-unit-params, else at `default_min_unit_parameters`), the comm hook, local SGD and
// DiLoCo. The same options train with and without --elastic (cohort::train_elastic_as).
template <typename TrainOptions>
cohort::StrategyOptions strategy_options(const TrainOptions& options,
                                         int64_t default_min_unit_parameters,
                                         std::shared_ptr<cohort::Timeline> timeline = nullptr) {
  cohort::StrategyOptions o;
  o.precision = checked_precision(options.precision, options.master_weights);
  o.bucket_cap_mb = options.plan.bucket_cap.mebibytes;
  o.timeline = std::move(timeline);
  o.background_checkpoints = !options.sync_checkpoint;
  apply_fsdp_settings(options.plan, default_min_unit_parameters, o);
  o.comm_hook = make_comm_hook(options.comm_hook);
  o.local_sgd = options.local_sgd.options();
  o.diloco = options.diloco.options();
  return o;
}

// One line per rank, printed by rank 0: each rank's model state (strategy.model_state_bytes),
// the most CPU tensor memory its training steps held at once above what training started with
// (step_memory_peak_bytes(), memory.h: activations, gradients, temporaries) and peak RSS.
// Collective over `group`.
void print_memory_of_ranks(const cohort::Strategy& strategy,
                           const torch::optim::Optimizer& optimizer, cohort::Group& group);

}  // namespace cohort_examples
