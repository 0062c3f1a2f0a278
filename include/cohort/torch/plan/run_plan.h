// Planning a run (docs/planner.md, "Planning a run"): what a run's StrategyOptions leave to the
// planner (the strategy, the buckets, FSDP's units and prefetch, local SGD or PowerSGD where
// allowed, a memory budget), chosen from one measured step of a probe copy of the model and the
// group's calibrated links, applied to the options make_strategy takes, and corrected after the
// run's first steps.
//
//   cohort::RunPlanRequest request;
//   request.options = options;                       // the run's StrategyOptions
//   request.automatic_buckets = true;                // leave the buckets to the planner
//   request.probe = probe_model;                     // a copy of the model, same weights
//   request.probe_loss = [&] { return loss_fn(probe_model->forward(first_batch)); };
//   request.probe_optimizer = [&](const auto& tensors) { return make_adamw(tensors); };
//   cohort::RunPlan plan = cohort::plan_run(*group, *model, request);      // collective
//   auto run = cohort::make_strategy(plan.strategy, model, group, plan.applied(options));
//   ... after each step: cohort::correct_plan(*group, plan, step, step_s,
//   run->last_step_communication(), *run);
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/compress/powersgd.h"
#include "cohort/torch/plan/planner.h"
#include "cohort/torch/strategy/strategy.h"

namespace cohort {

// DDP's first bucket sizes the planner considers where the buckets are left to it.
inline const std::vector<double> kPlannedFirstBucketCapsMb = {0.25, 1, 4};
// The local SGD periods RunPlanRequest::allow_local_sgd makes candidates.
inline const std::vector<int> kPlannedLocalSgdPeriods = {2, 4, 8, 16};

struct RunPlanRequest {
  // The strategy the run asked for; nullopt: the planner chooses, among `strategies` (empty:
  // every one `options` allow, strategies_allowed).
  std::optional<StrategyKind> strategy;
  std::vector<StrategyKind> strategies;
  // The run's options: its buckets (unless automatic_buckets), FSDP units and prefetch, local
  // SGD period, comm hook, precision, DiLoCo. What the planner chooses replaces them
  // (RunPlan::applied).
  StrategyOptions options;
  bool automatic_buckets = false;  // DDP's and ZeRO's bucket sizes are the planner's
  // With `strategy` nullopt and neither given by the run: FSDP's units and prefetch are the
  // planner's too.
  bool automatic_fsdp_units = false;
  int64_t memory_budget_bytes = 0;  // the most memory per rank a choice may need; 0: no limit
  // Local SGD periods (kPlannedLocalSgdPeriods) and PowerSGD at `powersgd` are candidates: they
  // change what training computes, so only where asked, and only under ddp without a hook,
  // local SGD, DiLoCo or master weights of the run's own.
  bool allow_local_sgd = false;
  bool allow_powersgd = false;
  // PowerSGD's settings: of the run's own hook when `runs_powersgd` (the planner then plans the
  // reduction as it runs), or of the candidate allow_powersgd adds.
  PowerSgdOptions powersgd;
  bool runs_powersgd = false;
  // The run's configuration is kept unless another is predicted this much faster
  // (PlannerOptions::min_gain).
  double min_gain = 0.10;
  // Where rank 0 writes the planner's input as JSON, for cohort-plan; empty: nowhere.
  std::string plan_out;
  int64_t optimizer_state_per_element = kAdamStateBytes;
  // A probe copy of the model (the same weights, and the same activation checkpointing), its
  // loss on this rank's first batch (under the run's autocast), and the run's optimizer over
  // the tensors given: the training step is timed on the copy at world 1, so that the model
  // itself is not changed, and again through FSDP over a group of one where an FSDP strategy is
  // a candidate.
  std::shared_ptr<torch::nn::Module> probe;
  std::function<torch::Tensor()> probe_loss;
  std::function<std::unique_ptr<torch::optim::Optimizer>(
      const torch::OrderedDict<std::string, torch::Tensor>&)>
      probe_optimizer;
};

struct RunPlan {
  StrategyKind strategy = StrategyKind::kDdp;
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;  // ddp's
  int local_sgd_period = 0;          // ddp: local SGD every this many steps; 0: off
  int powersgd_rank = 0;             // ddp: gradients through PowerSGD at this rank; 0: not
  int64_t powersgd_start_iter = 0;   // its plain steps first
  int64_t fsdp_min_unit_parameters = 0;
  bool fsdp_prefetch = true;
  Prediction prediction;        // corrected by correct_plan
  Prediction first_prediction;  // before it
  // What it was chosen from, for the online correction.
  PlanInput input;
  MachineSpec machine;
  PlannerOptions planner;
  std::vector<StepMeasurement> measured;  // steps 2 to 4
  bool corrected = false;

  // `options` with the choice's buckets, local SGD period, PowerSGD hook, FSDP units and
  // prefetch: what make_strategy(strategy, ...) takes.
  StrategyOptions applied(StrategyOptions options) const;
};

// Collective over `group`: measures the probe (every rank; the slowest counts), plans, logs the
// candidates at COHORT_LOG_LEVEL=info and prints the choice on rank 0. Throws InvalidArgument
// for a request that cannot be planned (candidates asked for that the options rule out, local
// SGD or PowerSGD allowed where they cannot run) or when nothing fits the budget.
RunPlan plan_run(Group& group, torch::nn::Module& model, const RunPlanRequest& request);

// The online correction: measures steps 2 to 4 (the first builds buckets and optimizer state),
// then at step 4 refits the model (the compute, but not under ZeRO; under ddp the links too,
// from the buckets' reductions) and, where it was off by more than 25%, plans again among the
// buckets of the chosen strategy and rebuilds them (Strategy::rebucket) if another size wins.
// Collective at step 4: every rank calls it after every step, with the step's number (from 1),
// its time without loading data, and what it communicated. Not under PowerSGD, whose first
// steps are plain allreduces, not what was predicted.
void correct_plan(Group& group, RunPlan& plan, int64_t step, double step_s,
                  const StepCommunication& communication, Strategy& strategy);

// A step's number (from 1) and its time without loading data.
struct StepTime {
  int64_t step = 0;
  double seconds = 0;
};

// At COHORT_LOG_LEVEL=info: the measured step (the median of `steps`, leaving out the first,
// which builds buckets and optimizer state, and under PowerSGD its plain steps; under local SGD
// their mean, as predicted) against the prediction, and the peak memory measured against the
// prediction. `when` names the steps ("epoch 2").
void log_plan_accuracy(const RunPlan& plan, const std::vector<StepTime>& steps,
                       int64_t measured_peak_bytes, const std::string& when);

}  // namespace cohort
