// --strategy auto, --bucket-cap-mb auto and the other planner options of both examples
// (docs/planner.md): what they leave to the planner, as the library's RunPlanRequest
// (cohort/torch/plan/run_plan.h, which measures the probe, plans and corrects the plan).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/plan/run_plan.h"
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
                         cohort::StrategyOptions& wrapping);

// Whether the options leave anything to the planner, check a budget, name planner options to
// check (--plan-strategies, --allow-local-sgd, --allow-powersgd) or ask for the planner's input
// (--plan-out). `strategy`: the --strategy given ("auto" or a name).
bool wants_plan(const std::string& strategy, const PlanSettings& settings);

// The library's request for what the options leave to the planner; the probe is the caller's
// to fill in. `wrapping`: the run's strategy options; `hook`: --comm-hook and its settings.
cohort::RunPlanRequest plan_request(const std::string& strategy, const PlanSettings& settings,
                                    const cohort::StrategyOptions& wrapping,
                                    const CommHookSettings& hook);

// cohort::correct_plan after every step, from its record.
void correct_plan(cohort::Group& group, cohort::RunPlan& plan, const StepRecord& record,
                  cohort::Strategy& strategy);

// cohort::log_plan_accuracy of an epoch's steps.
void log_plan_accuracy(const cohort::RunPlan& plan, const std::vector<StepRecord>& steps,
                       int64_t epoch, int64_t measured_peak_bytes);

// Optimizer state per parameter element of the examples' optimizers, by --optimizer name.
int64_t optimizer_state_per_element(const std::string& optimizer, double momentum);

}  // namespace cohort_examples
