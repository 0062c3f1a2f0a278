// plan_run and RunPlan::applied (cohort/torch/plan/run_plan.h): the planner's options from what
// the run leaves to it, the probe's measurement (run_plan_probe.cc), the choice.
#include "cohort/torch/plan/run_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "plan/run_plan_internal.h"

namespace cohort {
namespace {

int local_sgd_period(const StrategyOptions& options) {
  return options.local_sgd ? static_cast<int>(options.local_sgd->period) : 0;
}

// The run's own PowerSGD hook under ddp: its gradients go through PowerSGD whatever is planned.
int runs_powersgd_rank(const RunPlanRequest& request) {
  const StrategyOptions& o = request.options;
  const bool runs = request.runs_powersgd && o.comm_hook && !o.local_sgd && !o.diloco;
  return runs ? request.powersgd.rank : 0;
}

// The configuration the run has without the planner: its strategy (ddp where it is left to the
// planner) and bucket size (25 MiB where automatic), DDP's first bucket of 1 MiB, its own local
// SGD period or PowerSGD hook, and its own FSDP units and prefetch.
PlanConfig run_defaults(const RunPlanRequest& request) {
  PlanConfig config;
  config.strategy = request.strategy.value_or(StrategyKind::kDdp);
  if (!request.automatic_buckets) config.bucket_cap_mb = request.options.bucket_cap_mb;
  config.local_sgd_period = local_sgd_period(request.options);
  config.powersgd_rank = runs_powersgd_rank(request);
  config.min_unit_parameters = request.options.fsdp_min_unit_parameters;
  config.fsdp_prefetch = request.options.fsdp_prefetch;
  return config;
}

// Local SGD and PowerSGD as candidates change how DDP reduces its gradients: only under ddp,
// and not where the run's other options fix it.
void check_reduction_left_to_the_planner(const RunPlanRequest& request,
                                         const std::vector<StrategyKind>& allowed,
                                         const std::string& flag, const std::string& what,
                                         const std::string& why) {
  if (request.strategy && *request.strategy != StrategyKind::kDdp) {
    throw InvalidArgument(detail::concat(flag, ": ", what, " runs under ddp; --strategy is ",
                                         strategy_name(*request.strategy)));
  }
  const StrategyOptions& o = request.options;
  const bool ddp_allowed =
      std::find(allowed.begin(), allowed.end(), StrategyKind::kDdp) != allowed.end();
  if (!ddp_allowed || o.local_sgd || o.comm_hook || o.diloco || o.precision.master_weights) {
    throw InvalidArgument(
        detail::concat(flag, ": not with --local-sgd, --comm-hook, --diloco or --master-weights (",
                       why, "; RunPlanRequest's options hold one)"));
  }
}

// The candidates: the run's strategy, or those the request names that its options allow.
std::vector<StrategyKind> candidate_strategies(const RunPlanRequest& request,
                                               const std::vector<StrategyKind>& allowed) {
  const std::vector<StrategyKind>& asked = request.strategies;
  if (request.strategy) {
    if (!asked.empty()) {
      throw InvalidArgument(detail::concat(
          "--plan-strategies: only with --strategy auto (RunPlanRequest::strategies needs "
          "RunPlanRequest::strategy unset; the strategy is ",
          strategy_name(*request.strategy), ")"));
    }
    return {*request.strategy};
  }
  std::vector<StrategyKind> candidates;
  for (const StrategyKind kind : allowed) {
    if (asked.empty() || std::find(asked.begin(), asked.end(), kind) != asked.end()) {
      candidates.push_back(kind);
    }
  }
  if (candidates.empty()) {
    throw InvalidArgument(
        "--plan-strategies (RunPlanRequest::strategies): none of the strategies asked for runs "
        "with the other options given; these do: " +
        strategy_names(allowed));
  }
  return candidates;
}

PlannerOptions planner_options(const RunPlanRequest& request) {
  const std::vector<StrategyKind> allowed = strategies_allowed(request.options);
  PlannerOptions options;
  options.memory_budget_bytes = request.memory_budget_bytes;
  options.strategies = candidate_strategies(request, allowed);
  // The FSDP units and prefetch are the planner's only where the strategy is: a strategy named
  // runs as its options say.
  options.search_fsdp_units = !request.strategy && request.automatic_fsdp_units;
  options.fsdp_prefetch = request.options.fsdp_prefetch;
  if (request.automatic_buckets) {
    options.first_bucket_caps_mb = kPlannedFirstBucketCapsMb;
  } else {
    options.bucket_caps_mb = {request.options.bucket_cap_mb};
  }
  if (request.allow_local_sgd) {
    check_reduction_left_to_the_planner(request, allowed, "--allow-local-sgd", "local SGD",
                                        "the planner chooses the period");
    options.local_sgd_periods = kPlannedLocalSgdPeriods;
  }
  if (request.allow_powersgd) {
    check_reduction_left_to_the_planner(
        request, allowed, "--allow-powersgd", "PowerSGD",
        "the planner chooses whether PowerSGD reduces the gradients");
    options.powersgd_ranks = {request.powersgd.rank};
  }
  // What the run's options fix of how DDP reduces its gradients is planned as it will run
  // (keep_the_runs_reduction).
  if (request.options.local_sgd) options.local_sgd_periods = {local_sgd_period(request.options)};
  if (const int rank = runs_powersgd_rank(request)) options.powersgd_ranks = {rank};
  options.baseline = run_defaults(request);
  options.min_gain = request.min_gain;
  return options;
}

// A run whose options fix how DDP reduces its gradients (local SGD, a PowerSGD hook) keeps it:
// where the plan chose another reduction, the choice is the fastest configuration that fits and
// reduces them so.
void keep_the_runs_reduction(const RunPlanRequest& request, Plan& plan) {
  const int period = local_sgd_period(request.options);
  const int rank = runs_powersgd_rank(request);
  if (period == 0 && rank == 0) return;  // the planner may choose (allow_local_sgd, ...)
  const auto runs_so = [&](const Prediction& p) {
    return p.config.local_sgd_period == period && p.config.powersgd_rank == rank;
  };
  if (runs_so(plan.chosen)) return;  // the run's baseline included
  const auto chosen = std::find_if(plan.candidates.begin(), plan.candidates.end(),
                                   [&](const Prediction& p) { return runs_so(p) && p.fits; });
  if (chosen == plan.candidates.end()) {
    throw InvalidArgument(detail::concat("--memory-budget-mb: no configuration with ",
                                         period > 0 ? "--local-sgd" : "--comm-hook powersgd",
                                         " fits ", request.memory_budget_bytes / (1024 * 1024),
                                         " MiB per rank (RunPlanRequest::memory_budget_bytes)"));
  }
  plan.chosen = *chosen;
}

// FSDP's unit layouts besides the run's own, cut at a spread of sizes
// (ModelSpec::unit_thresholds): candidates where the units are the planner's, and in the plan
// input for cohort-plan.
std::vector<int64_t> other_unit_thresholds(const RunPlanRequest& request,
                                           const PlannerOptions& options,
                                           torch::nn::Module& model) {
  if (!request.plan_out.empty() ||
      (options.search_fsdp_units && plan_detail::fsdp_is_a_candidate(options))) {
    return ModelSpec::unit_thresholds(model);
  }
  return {};
}

void write_plan_input(const RunPlanRequest& request, const PlanInput& input) {
  std::ofstream out(request.plan_out);
  out << input.to_json();
  if (!out) throw InvalidArgument("--plan-out: cannot write " + request.plan_out);
}

RunPlan choice_of(const Plan& plan, const RunPlanRequest& request, const ModelSpec& spec,
                  const ComputeProfile& compute, const MachineSpec& machine,
                  const PlannerOptions& options) {
  RunPlan choice;
  const PlanConfig& config = plan.chosen.config;
  choice.strategy = config.strategy;
  choice.bucket_cap_mb = config.bucket_cap_mb;
  choice.first_bucket_cap_mb = config.first_bucket_cap_mb;
  choice.local_sgd_period = config.local_sgd_period;
  choice.powersgd_rank = config.powersgd_rank;
  choice.powersgd_start_iter = request.powersgd.start_iter;
  choice.fsdp_min_unit_parameters = config.min_unit_parameters.value_or(spec.min_unit_parameters);
  choice.fsdp_prefetch = config.fsdp_prefetch;
  choice.prediction = choice.first_prediction = plan.chosen;
  choice.input = {spec, compute};
  choice.machine = machine;
  choice.planner = options;
  return choice;
}

void say_the_choice(const Plan& plan, const ComputeProfile& compute, const MachineSpec& machine) {
  COHORT_LOG(kInfo, "plan: compute forward ", compute.forward_s * 1e3, " ms, backward ",
             compute.backward_s * 1e3, " ms, optimizer ", compute.optimizer_s * 1e3,
             " ms, under FSDP x", compute.sharded_compute_ratio, "; links: ", machine.links.source,
             "\n", plan.table(plan.candidates.size()));
  std::printf(
      "plan: %s (predicted step %.1f ms, %.1f ms of it communication not hidden; peak %.1f MiB "
      "per rank; %zu candidates)\n",
      plan.chosen.config.describe().c_str(), plan.chosen.step_s * 1e3, plan.chosen.exposed_s * 1e3,
      static_cast<double>(plan.chosen.peak_memory_bytes) / (1024.0 * 1024.0),
      plan.candidates.size());
  std::fflush(stdout);
}

}  // namespace

StrategyOptions RunPlan::applied(StrategyOptions options) const {
  options.bucket_cap_mb = bucket_cap_mb;
  options.first_bucket_cap_mb = first_bucket_cap_mb;
  if (local_sgd_period > 0) {
    LocalSgdOptions local_sgd = options.local_sgd.value_or(LocalSgdOptions{});
    if (!options.local_sgd) local_sgd.warmup_steps = 0;
    local_sgd.period = local_sgd_period;
    options.local_sgd = local_sgd;
  } else {
    options.local_sgd.reset();
  }
  if (powersgd_rank > 0) {
    PowerSgdOptions powersgd;
    powersgd.rank = powersgd_rank;
    powersgd.start_iter = powersgd_start_iter;
    options.comm_hook = powersgd_hook(powersgd);
  }
  options.fsdp_min_unit_parameters = fsdp_min_unit_parameters;
  options.fsdp_prefetch = fsdp_prefetch;
  return options;
}

RunPlan plan_run(Group& group, torch::nn::Module& model, const RunPlanRequest& request) {
  COHORT_CHECK(request.probe && request.probe_loss && request.probe_optimizer,
               "plan_run: RunPlanRequest needs the probe, its loss and its optimizer");
  const PlannerOptions options = planner_options(request);  // checked before the probe
  auto spec = ModelSpec::of(model, request.optimizer_state_per_element,
                            request.options.fsdp_min_unit_parameters,
                            other_unit_thresholds(request, options, model));
  if (request.options.precision.master_weights) {
    spec.master_weights = request.options.precision.compute_dtype;
  }
  // Every rank times its probe at once, as they will train: a rank still loading its data would
  // otherwise take cores from one already timing.
  group.barrier();
  auto compute = plan_detail::measure_probe(request, options);
  compute.agree(group);
  const auto machine = MachineSpec::of(group);
  if (group.rank() == 0 && !request.plan_out.empty()) write_plan_input(request, {spec, compute});
  Plan plan = cohort::plan(spec, compute, machine, options);
  keep_the_runs_reduction(request, plan);
  plan.chosen = plan.candidates[plan_detail::rank0_choice(group, plan)];
  if (group.rank() == 0) say_the_choice(plan, compute, machine);
  return choice_of(plan, request, spec, compute, machine, options);
}

}  // namespace cohort
