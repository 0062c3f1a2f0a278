// --strategy auto and --bucket-cap-mb auto of both examples (docs/planner.md): the planner
// chooses what is left to it from the model, one measured compute profile on a probe copy of
// the model and the group's calibrated links; --memory-budget-mb caps the peak memory per rank.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/plan/planner.h"
#include "comm_hooks.h"
#include "step_metrics.h"
#include "strategy.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cohort_examples {

// What --bucket-cap-mb holds: a size in MiB, or "auto".
struct BucketCap {
  double mebibytes = 25.0;
  bool automatic = false;
};

// What the examples' planner options hold.
struct PlanSettings {
  BucketCap bucket_cap;          // --bucket-cap-mb: MiB, or auto
  int64_t memory_budget_mb = 0;  // --memory-budget-mb: the planner's limit; 0: none
  std::string plan_out;          // --plan-out: where rank 0 writes the job's plan input
  bool allow_local_sgd = false;  // --allow-local-sgd: local SGD periods are candidates
  bool allow_powersgd = false;   // --allow-powersgd: PowerSGD at --hook-rank is a candidate
  // --plan-min-gain: the run's own configuration is kept unless another is predicted this many
  // percent faster (PlannerOptions::min_gain).
  double min_gain_percent = 10;
  // --plan-strategies: with --strategy auto, the strategies to choose among (default: every one
  // the run's other options allow).
  std::vector<std::string> strategies;
  // --fsdp-min-unit-params and --fsdp-no-prefetch: the FSDP strategies' units and prefetch,
  // which --strategy auto chooses unless one of them is given.
  std::optional<int64_t> fsdp_min_unit_parameters;
  bool fsdp_no_prefetch = false;
};

// --bucket-cap-mb (a positive number or "auto"), --memory-budget-mb, --plan-out,
// --plan-strategies, --allow-local-sgd, --allow-powersgd, --plan-min-gain,
// --fsdp-min-unit-params and --fsdp-no-prefetch.
void add_plan_options(CLI::App& app, PlanSettings& settings);

// The FSDP units and prefetch `settings` give in `wrapping`: units cut at
// --fsdp-min-unit-params, else at the example's own `default_min_unit_parameters`.
void apply_fsdp_settings(const PlanSettings& settings, int64_t default_min_unit_parameters,
                         StrategyOptions& wrapping);

struct PlanRequest {
  std::string strategy;  // the --strategy given: "auto" or a name of kStrategyNames
  PlanSettings settings;
  // Strategies the run's other options allow (hooks, local SGD and DiLoCo need ddp; master
  // weights rule out ZeRO).
  std::vector<std::string> allowed;
  int64_t optimizer_state_per_element = cohort::kAdamStateBytes;
  // A probe copy of the model, its loss at this rank's first batch, and the run's optimizer over
  // the tensors given: the training step is timed on the copy at world 1 so that the model itself
  // is not changed, and again through FSDP over a group of one where an FSDP strategy is a
  // candidate (ComputeProfile::measure_sharded), with `wrapping`'s units and dtype.
  std::shared_ptr<torch::nn::Module> probe;
  std::function<torch::Tensor()> probe_loss;
  std::function<std::unique_ptr<torch::optim::Optimizer>(
      const torch::OrderedDict<std::string, torch::Tensor>&)>
      probe_optimizer;
  StrategyOptions wrapping;
  // --hook-rank and --hook-start-iter: PowerSGD's, where --allow-powersgd lets the planner
  // choose it.
  CommHookSettings hook;
};

// DDP's first bucket sizes --bucket-cap-mb auto lets the planner consider.
inline const std::vector<double> kPlannedFirstBucketCapsMb = {0.25, 1, 4};
// The local SGD periods --allow-local-sgd lets the planner consider.
inline const std::vector<int> kPlannedLocalSgdPeriods = {2, 4, 8, 16};

struct PlanChoice {
  std::string strategy;
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;  // ddp's
  int local_sgd_period = 0;  // ddp: local SGD every this many steps (StrategyOptions); 0: off
  int powersgd_rank = 0;     // ddp: gradients through PowerSGD at this rank; 0: not
  int64_t powersgd_start_iter = 0;       // its plain steps first (--hook-start-iter)
  int64_t fsdp_min_unit_parameters = 0;  // the FSDP strategies' units (StrategyOptions)
  bool fsdp_prefetch = true;
  cohort::Prediction prediction;
  // What it was chosen from, for the online correction.
  cohort::PlanInput input;
  cohort::MachineSpec machine;
  cohort::PlannerOptions options;
  cohort::Prediction first_prediction;            // before the online correction
  std::vector<cohort::StepMeasurement> measured;  // steps 2 to 4
  bool corrected = false;
};

// Whether the request leaves anything to the planner, checks a budget, names planner options to
// check (--plan-strategies, --allow-local-sgd, --allow-powersgd) or asks for the planner's
// input (--plan-out).
bool wants_plan(const PlanRequest& request);

// Collective over `group`: measures the probe (every rank; the slowest counts), plans, logs the
// candidates at COHORT_LOG_LEVEL=info and prints the choice on rank 0. Throws
// cohort::InvalidArgument when nothing fits the budget.
PlanChoice choose_configuration(cohort::Group& group, torch::nn::Module& model,
                                const PlanRequest& request);

// The choice's buckets, local SGD period, PowerSGD hook, FSDP units and prefetch in the options
// the strategy is made with (its name goes to make_strategy).
void apply_plan(const PlanChoice& choice, StrategyOptions& wrapping);

// The online correction (docs/planner.md): measures steps 2 to 4 (the first builds buckets and
// optimizer state), then at step 4 refits the model (the compute, but not under ZeRO; under DDP the
// links too, from the buckets' reductions) and, where it was off by more than 25%, plans again
// among the buckets of the chosen strategy and rebuilds them if another size wins. Collective at
// step 4 (every rank calls it after every step). Not under PowerSGD, whose first steps
// (--hook-start-iter) are plain allreduces, not what was predicted.
void correct_plan(cohort::Group& group, PlanChoice& choice, const StepRecord& record,
                  Strategy& strategy);

// At COHORT_LOG_LEVEL=info: the epoch's median step (under local SGD the mean, as predicted;
// without loading data; the first step of the run, which builds buckets and optimizer state,
// left out, and under PowerSGD its plain steps before --hook-start-iter) against the prediction.
// And the peak memory measured (training_peak_bytes(), memory.h) against the prediction.
void log_plan_accuracy(const PlanChoice& choice, const std::vector<StepRecord>& steps,
                       int64_t epoch, int64_t measured_peak_bytes);

// Optimizer state per parameter element of the examples' optimizers, by --optimizer name.
int64_t optimizer_state_per_element(const std::string& optimizer, double momentum);

}  // namespace cohort_examples
