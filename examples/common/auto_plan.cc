#include "auto_plan.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>

#include "cohort/comm/inproc_transport.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "cohort/torch/compress/powersgd.h"
#include "cohort/torch/tensor_buffer.h"
#include "strategy.h"

namespace cohort_examples {
namespace {

cohort::PlanStrategy plan_strategy(const std::string& name) {
  const auto strategy = cohort::plan_strategy_named(name);
  COHORT_CHECK(strategy.has_value(), "--strategy ", name, " has no planner counterpart");
  return *strategy;
}

// Rank 0's choice, by its place among the candidates, on every rank: the ranks plan from the same
// figures, but a last bit of floating-point difference between machines must not split them.
size_t rank0_choice(cohort::Group& group, const cohort::Plan& plan) {
  size_t index = 0;
  while (plan.candidates[index].config.describe() != plan.chosen.config.describe()) ++index;
  auto chosen = torch::tensor({static_cast<int64_t>(index)}, torch::kInt64);
  group.broadcast(cohort::tensor_buffer(chosen), cohort::CollectiveOptions{});
  return static_cast<size_t>(chosen.item<int64_t>());
}

std::string comma_separated(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

// --comm-hook powersgd under ddp: the run's gradients go through PowerSGD whatever is planned.
bool runs_powersgd(const PlanRequest& request) {
  return request.hook.name == "powersgd" && request.wrapping.comm_hook &&
         request.wrapping.local_sgd_period == 0 && !request.wrapping.diloco.enabled();
}

// The configuration the run has without the planner: its strategy (ddp under --strategy auto)
// and bucket size (25 MiB where auto), DDP's first bucket of 1 MiB, its own local SGD period or
// PowerSGD hook, and its own FSDP units and prefetch.
cohort::PlanConfig run_defaults(const PlanRequest& request) {
  cohort::PlanConfig config;
  config.strategy = plan_strategy(request.strategy == "auto" ? "ddp" : request.strategy);
  if (!request.settings.bucket_cap.automatic) {
    config.bucket_cap_mb = request.settings.bucket_cap.mebibytes;
  }
  config.local_sgd_period = static_cast<int>(request.wrapping.local_sgd_period);
  config.powersgd_rank = runs_powersgd(request) ? request.hook.rank : 0;
  config.min_unit_parameters = request.wrapping.fsdp_min_unit_parameters;
  config.fsdp_prefetch = request.wrapping.fsdp_prefetch;
  return config;
}

// --allow-local-sgd and --allow-powersgd (`flag`) let the planner choose how DDP reduces its
// gradients: only under ddp, and not where the run's other options fix it.
void check_reduction_left_to_the_planner(const PlanRequest& request, const std::string& flag,
                                         const std::string& what, const std::string& why) {
  COHORT_CHECK(request.strategy == "auto" || request.strategy == "ddp", flag, ": ", what,
               " runs under ddp; --strategy is ", request.strategy);
  COHORT_CHECK(
      std::find(request.allowed.begin(), request.allowed.end(), "ddp") != request.allowed.end() &&
          request.wrapping.local_sgd_period == 0 && !request.wrapping.comm_hook &&
          !request.wrapping.diloco.enabled() && !request.wrapping.master_weights,
      flag, ": not with --local-sgd, --comm-hook, --diloco or --master-weights (", why, ")");
}

cohort::PlannerOptions planner_options(const PlanRequest& request) {
  cohort::PlannerOptions options;
  options.memory_budget_bytes = request.settings.memory_budget_mb * 1024 * 1024;
  options.strategies.clear();
  const std::vector<std::string>& asked = request.settings.strategies;
  COHORT_CHECK(asked.empty() || request.strategy == "auto",
               "--plan-strategies: only with --strategy auto (--strategy is ", request.strategy,
               ")");
  if (request.strategy == "auto") {
    for (const auto& name : request.allowed) {
      if (asked.empty() || std::find(asked.begin(), asked.end(), name) != asked.end()) {
        options.strategies.push_back(plan_strategy(name));
      }
    }
    COHORT_CHECK(!options.strategies.empty(),
                 "--plan-strategies: none of the strategies asked for runs with the other "
                 "options given; these do: ",
                 comma_separated(request.allowed));
  } else {
    options.strategies.push_back(plan_strategy(request.strategy));
  }
  // The FSDP units and prefetch are the planner's under --strategy auto only: a strategy named
  // runs as its options say.
  options.search_fsdp_units = request.strategy == "auto" &&
                              !request.settings.fsdp_min_unit_parameters &&
                              !request.settings.fsdp_no_prefetch;
  options.fsdp_prefetch = request.wrapping.fsdp_prefetch;
  if (request.settings.bucket_cap.automatic) {
    options.first_bucket_caps_mb = kPlannedFirstBucketCapsMb;
  } else {
    options.bucket_caps_mb = {request.settings.bucket_cap.mebibytes};
  }
  if (request.settings.allow_local_sgd) {
    check_reduction_left_to_the_planner(request, "--allow-local-sgd", "local SGD",
                                        "the planner chooses the period");
    options.local_sgd_periods = kPlannedLocalSgdPeriods;
  }
  if (request.settings.allow_powersgd) {
    check_reduction_left_to_the_planner(
        request, "--allow-powersgd", "PowerSGD",
        "the planner chooses whether PowerSGD reduces the gradients");
    options.powersgd_ranks = {request.hook.rank};
  }
  // What the run's options fix of how DDP reduces its gradients is planned as it will run
  // (keep_the_runs_reduction).
  if (request.wrapping.local_sgd_period > 0) {
    options.local_sgd_periods = {static_cast<int>(request.wrapping.local_sgd_period)};
  }
  if (runs_powersgd(request)) options.powersgd_ranks = {request.hook.rank};
  options.baseline = run_defaults(request);
  options.min_gain = request.settings.min_gain_percent / 100;
  return options;
}

// A run whose options fix how DDP reduces its gradients (--local-sgd, --comm-hook powersgd)
// keeps it: where the plan chose another reduction, the choice is the fastest configuration
// that fits and reduces them so.
void keep_the_runs_reduction(const PlanRequest& request, cohort::Plan& plan) {
  const auto period = static_cast<int>(request.wrapping.local_sgd_period);
  const int rank = runs_powersgd(request) ? request.hook.rank : 0;
  if (period == 0 && rank == 0) return;  // the planner may choose (--allow-local-sgd, ...)
  const auto runs_so = [&](const cohort::Prediction& p) {
    return p.config.local_sgd_period == period && p.config.powersgd_rank == rank;
  };
  if (runs_so(plan.chosen)) return;  // the run's baseline included
  const auto chosen =
      std::find_if(plan.candidates.begin(), plan.candidates.end(),
                   [&](const cohort::Prediction& p) { return runs_so(p) && p.fits; });
  COHORT_CHECK(chosen != plan.candidates.end(), "--memory-budget-mb: no configuration with ",
               period > 0 ? "--local-sgd" : "--comm-hook powersgd", " fits ",
               request.settings.memory_budget_mb, " MiB per rank");
  plan.chosen = *chosen;
}

bool fsdp_is_a_candidate(const cohort::PlannerOptions& options) {
  return std::any_of(options.strategies.begin(), options.strategies.end(), [](auto strategy) {
    return strategy == cohort::PlanStrategy::kFullShard ||
           strategy == cohort::PlanStrategy::kShardGradOp ||
           strategy == cohort::PlanStrategy::kHybridShard;
  });
}

// FSDP's unit layouts besides the run's own, cut at a spread of sizes
// (ModelSpec::unit_thresholds): candidates under --strategy auto, and in the plan input for
// cohort-plan.
std::vector<int64_t> other_unit_thresholds(const PlanRequest& request,
                                           const cohort::PlannerOptions& options,
                                           torch::nn::Module& model) {
  if (!request.settings.plan_out.empty() ||
      (options.search_fsdp_units && fsdp_is_a_candidate(options))) {
    return cohort::ModelSpec::unit_thresholds(model);
  }
  return {};
}

// DDP's gradients through one hook or the other, switched between steps: the probe times
// PowerSGD's arithmetic against the plain allreduce on one DDP (two at once would both reduce).
class SwitchedHook final : public cohort::CommHook {
 public:
  SwitchedHook(std::shared_ptr<cohort::CommHook> plain, std::shared_ptr<cohort::CommHook> other)
      : plain_(std::move(plain)), other_(std::move(other)) {}
  cohort::PendingReduction start(cohort::Group& group, cohort::GradBucket& bucket) override {
    return (use_other ? other_ : plain_)->start(group, bucket);
  }
  std::string name() const override { return use_other ? other_->name() : plain_->name(); }
  bool use_other = false;

 private:
  std::shared_ptr<cohort::CommHook> plain_, other_;
};

// The probe's training step through `strategy` over a group of one (no communication, and no
// loss scaling).
std::function<void()> probe_step(const PlanRequest& request, Strategy& strategy,
                                 torch::optim::Optimizer& optimizer) {
  cohort::amp::GradScalerOptions scaling;
  scaling.enabled = false;
  auto no_scaling = std::make_shared<cohort::amp::GradScaler>(scaling);  // made once, not timed
  return [&request, &strategy, &optimizer, no_scaling] {
    strategy.zero_grad(optimizer);
    request.probe_loss().backward();
    strategy.step(optimizer, *no_scaling);
  };
}

std::unique_ptr<Strategy> probe_strategy(const PlanRequest& request, const std::string& name,
                                         std::shared_ptr<cohort::CommHook> hook = nullptr) {
  StrategyOptions wrapping = request.wrapping;
  wrapping.timeline = nullptr;  // the probe's copies are not the run's communication
  wrapping.comm_hook = std::move(hook);
  auto alone = cohort::Group::create_inproc(std::make_shared<cohort::InprocFabric>(1), 0);
  return make_strategy(name, request.probe, alone, wrapping);
}

// The probe's plain training step at world 1. Under --master-weights the step is DDP's over a
// group of one (no communication), which holds the model in 16-bit and steps float32 masters
// as the run does; the probe is float32 again after it, as FSDP's probe takes it.
cohort::ComputeProfile measure_plain_step(const PlanRequest& request) {
  if (request.wrapping.master_weights) {
    auto ddp = probe_strategy(request, "ddp");
    auto optimizer = request.probe_optimizer(ddp->optimizer_parameters());
    auto compute =
        cohort::ComputeProfile::measure(*request.probe, probe_step(request, *ddp, *optimizer));
    ddp.reset();
    request.probe->to(torch::kFloat32);
    return compute;
  }
  auto optimizer = request.probe_optimizer(request.probe->named_parameters());
  return cohort::ComputeProfile::measure(*request.probe, [&] {
    optimizer->zero_grad();
    request.probe_loss().backward();
    optimizer->step();
  });
}

// The probe's training step at world 1: plain; then (where PowerSGD may be chosen) through DDP
// over a group of one with PowerSGD and with the plain allreduce, in turns; then (where an FSDP
// strategy may be chosen) through FULL_SHARD over a group of one, whose cost over the plain step
// is FSDP's own compute. FSDP comes last: it flattens the probe's parameters.
cohort::ComputeProfile measure_probe(const PlanRequest& request,
                                     const cohort::PlannerOptions& options) {
  auto compute = measure_plain_step(request);
  for (int rank : options.powersgd_ranks) {
    cohort::PowerSgdOptions powersgd;
    powersgd.rank = rank;
    powersgd.start_iter = 0;  // compress from the first step timed
    auto hook =
        std::make_shared<SwitchedHook>(cohort::allreduce_hook(), cohort::powersgd_hook(powersgd));
    auto ddp = probe_strategy(request, "ddp", hook);
    auto ddp_optimizer = request.probe_optimizer(ddp->optimizer_parameters());
    const auto step = probe_step(request, *ddp, *ddp_optimizer);
    compute.measure_powersgd(
        rank,
        [&] {
          hook->use_other = false;
          step();
        },
        [&] {
          hook->use_other = true;
          step();
        });
  }
  if (!fsdp_is_a_candidate(options)) return compute;
  auto sharded = probe_strategy(request, "full_shard");
  auto sharded_optimizer = request.probe_optimizer(sharded->optimizer_parameters());
  compute.measure_sharded(probe_step(request, *sharded, *sharded_optimizer));
  return compute;
}

}  // namespace

void add_plan_options(CLI::App& app, PlanSettings& settings) {
  BucketCap& bucket_cap = settings.bucket_cap;
  app.add_option_function<std::string>(
         "--bucket-cap-mb",
         [&bucket_cap](const std::string& text) {
           bucket_cap.automatic = text == "auto";
           if (!bucket_cap.automatic) bucket_cap.mebibytes = std::stod(text);
         },
         "DDP and ZeRO gradient bucket size in MiB, or auto: the planner's (docs/planner.md)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "auto") return "";
            try {
              if (std::stod(text) > 0) return "";
            } catch (const std::exception&) {
            }
            return "must be a positive number of MiB or auto, got " + text;
          },
          "MiB|auto"))
      ->default_str("25");
  app.add_option("--memory-budget-mb", settings.memory_budget_mb,
                 "With --strategy auto: the most memory per rank the chosen configuration may "
                 "need, in MiB (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plan-out", settings.plan_out,
                 "Write this job's planner input here (rank 0), for cohort-plan");
  app.add_option_function<int64_t>(
         "--fsdp-min-unit-params",
         [&settings](const int64_t& count) { settings.fsdp_min_unit_parameters = count; },
         "FSDP strategies: besides the children of every Sequential and ModuleList, any "
         "submodule of at least this many parameters is a unit (0: none); with --strategy auto "
         "the planner chooses it unless given")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--fsdp-no-prefetch", settings.fsdp_no_prefetch,
               "FSDP strategies: gather each unit only when it is needed (one unit gathered fewer, "
               "no all-gather hidden behind compute); with --strategy auto the planner chooses "
               "unless given");
  app.add_option("--plan-min-gain", settings.min_gain_percent,
                 "With a planner: keep the run's own configuration (under --strategy auto the "
                 "defaults, ddp with 25 MiB buckets) unless another is predicted at least this "
                 "many percent faster; 0: the fastest predicted (docs/planner.md)")
      ->check(CLI::Range(0.0, 100.0))
      ->capture_default_str();
  app.add_option("--plan-strategies", settings.strategies,
                 "With --strategy auto: the strategies the planner chooses among, e.g. "
                 "ddp,full_shard (default: every one the other options allow)")
      ->delimiter(',')
      ->check(CLI::IsMember(kStrategyNames));
  app.add_flag("--allow-local-sgd", settings.allow_local_sgd,
               "With --strategy auto or ddp: the planner may choose local SGD (a period of 2, 4, "
               "8 or 16 steps), which changes what training computes (docs/planner.md)");
  app.add_flag("--allow-powersgd", settings.allow_powersgd,
               "With --strategy auto or ddp: the planner may choose to reduce DDP's gradients "
               "through PowerSGD at --hook-rank (after --hook-start-iter plain steps), which "
               "changes what training computes (docs/planner.md)");
}

void apply_fsdp_settings(const PlanSettings& settings, int64_t default_min_unit_parameters,
                         StrategyOptions& wrapping) {
  wrapping.fsdp_min_unit_parameters =
      settings.fsdp_min_unit_parameters.value_or(default_min_unit_parameters);
  wrapping.fsdp_prefetch = !settings.fsdp_no_prefetch;
}

bool wants_plan(const PlanRequest& request) {
  return request.strategy == "auto" || request.settings.bucket_cap.automatic ||
         request.settings.memory_budget_mb > 0 || !request.settings.plan_out.empty() ||
         request.settings.allow_local_sgd || request.settings.allow_powersgd ||
         !request.settings.strategies.empty();
}

PlanChoice choose_configuration(cohort::Group& group, torch::nn::Module& model,
                                const PlanRequest& request) {
  COHORT_CHECK(request.probe && request.probe_loss && request.probe_optimizer,
               "choose_configuration: no probe");
  const cohort::PlannerOptions options = planner_options(request);  // checked before the probe
  auto spec = cohort::ModelSpec::of(model, request.optimizer_state_per_element,
                                    request.wrapping.fsdp_min_unit_parameters,
                                    other_unit_thresholds(request, options, model));
  if (request.wrapping.master_weights) spec.master_weights = *request.wrapping.master_weights;
  // Every rank times its probe at once, as they will train: a rank still loading its data would
  // otherwise take cores from one already timing.
  group.barrier();
  auto compute = measure_probe(request, options);
  compute.agree(group);
  const auto machine = cohort::MachineSpec::of(group);
  if (group.rank() == 0 && !request.settings.plan_out.empty()) {
    std::ofstream out(request.settings.plan_out);
    out << cohort::PlanInput{spec, compute}.to_json();
    if (!out) {
      throw cohort::InvalidArgument("--plan-out: cannot write " + request.settings.plan_out);
    }
  }
  cohort::Plan plan = cohort::plan(spec, compute, machine, options);
  keep_the_runs_reduction(request, plan);
  plan.chosen = plan.candidates[rank0_choice(group, plan)];
  PlanChoice choice;
  choice.strategy = cohort::plan_strategy_name(plan.chosen.config.strategy);
  choice.bucket_cap_mb = plan.chosen.config.bucket_cap_mb;
  choice.first_bucket_cap_mb = plan.chosen.config.first_bucket_cap_mb;
  choice.local_sgd_period = plan.chosen.config.local_sgd_period;
  choice.powersgd_rank = plan.chosen.config.powersgd_rank;
  choice.powersgd_start_iter = request.hook.start_iter;
  choice.fsdp_min_unit_parameters =
      plan.chosen.config.min_unit_parameters.value_or(spec.min_unit_parameters);
  choice.fsdp_prefetch = plan.chosen.config.fsdp_prefetch;
  choice.prediction = choice.first_prediction = plan.chosen;
  choice.input = {spec, compute};
  choice.machine = machine;
  choice.options = options;
  if (group.rank() == 0) {
    COHORT_LOG(kInfo, "plan: compute forward ", compute.forward_s * 1e3, " ms, backward ",
               compute.backward_s * 1e3, " ms, optimizer ", compute.optimizer_s * 1e3,
               " ms, under FSDP x", compute.sharded_compute_ratio,
               "; links: ", machine.links.source, "\n", plan.table(plan.candidates.size()));
    std::printf(
        "plan: %s (predicted step %.1f ms, %.1f ms of it communication not hidden; "
        "peak %.1f MiB per rank; %zu candidates)\n",
        plan.chosen.config.describe().c_str(), plan.chosen.step_s * 1e3,
        plan.chosen.exposed_s * 1e3,
        static_cast<double>(plan.chosen.peak_memory_bytes) / (1024.0 * 1024.0),
        plan.candidates.size());
    std::fflush(stdout);
  }
  return choice;
}

namespace {

constexpr int64_t kFirstMeasuredStep = 2;  // the first builds buckets and optimizer state
constexpr int64_t kCorrectionStep = 4;
constexpr double kOffBy = 0.25;

// The median over the steps measured of the compute, the slowest rank's, and of the reductions'
// total, the fastest rank's (every rank refits alike). A reduction's time runs from when this rank
// started it, so a rank that got there first also counts its wait for the last: the last to start
// times the wire alone (on 2 hosts x 2 ranks at 100 Mbit/s, the slowest rank's was 130% of the
// prediction while the exposed communication was within 6% of it).
cohort::StepMeasurement agreed_measurement(cohort::Group& group,
                                           const std::vector<cohort::StepMeasurement>& steps) {
  std::vector<double> compute, reductions;
  for (const auto& s : steps) {
    compute.push_back(s.compute_s);
    double total = 0;
    for (double r : s.reduction_s) total += r;
    reductions.push_back(total);
  }
  auto figures =  // the maximum of minus the reductions is minus their minimum
      torch::tensor({quantile(compute, 0.5), -quantile(reductions, 0.5)}, torch::kFloat64);
  cohort::CollectiveOptions max;
  max.op = cohort::ReduceOp::kMax;
  group.allreduce(cohort::tensor_buffer(figures), max);
  cohort::StepMeasurement agreed;
  agreed.compute_s = figures[0].item<double>();
  agreed.reduction_s = {-figures[1].item<double>()};
  return agreed;
}

}  // namespace

void apply_plan(const PlanChoice& choice, StrategyOptions& wrapping) {
  wrapping.bucket_cap_mb = choice.bucket_cap_mb;
  wrapping.first_bucket_cap_mb = choice.first_bucket_cap_mb;
  wrapping.local_sgd_period = choice.local_sgd_period;
  if (choice.powersgd_rank > 0) {
    cohort::PowerSgdOptions powersgd;
    powersgd.rank = choice.powersgd_rank;
    powersgd.start_iter = choice.powersgd_start_iter;
    wrapping.comm_hook = cohort::powersgd_hook(powersgd);
  }
  wrapping.fsdp_min_unit_parameters = choice.fsdp_min_unit_parameters;
  wrapping.fsdp_prefetch = choice.fsdp_prefetch;
}

void correct_plan(cohort::Group& group, PlanChoice& choice, const StepRecord& record,
                  Strategy& strategy) {
  // PowerSGD's first steps are plain allreduces (--hook-start-iter): nothing to compare.
  if (choice.corrected || choice.powersgd_rank > 0 || record.step < kFirstMeasuredStep) return;
  cohort::StepMeasurement step;
  step.compute_s = (record.step_ms - record.data_ms - record.exposed_comm_ms) * 1e-3;
  for (double ms : record.bucket_comm_ms) step.reduction_s.push_back(ms * 1e-3);
  choice.measured.push_back(step);
  if (record.step < kCorrectionStep) return;
  choice.corrected = true;
  cohort::StepMeasurement measured = agreed_measurement(group, choice.measured);
  // The reductions of ZeRO and FSDP run beside compute for the same cores here and measure
  // slower than their links, while their all-gathers, which wait on the step, do not: scaling the
  // links by them overshoots. Only DDP's, whose buckets are what a correction changes, refit the
  // links.
  const cohort::PlanStrategy running = choice.prediction.config.strategy;
  if (running != cohort::PlanStrategy::kDdp) measured.reduction_s.clear();
  // ZeRO's optimizer step waits for its all-gathers, which the step record counts as compute
  // (its exposed communication is backward's wait): scaled by them, the compute would overshoot
  // (fashion_mnist on 2 hosts x 2 ranks at 100 Mbit/s: 922 ms corrected against 704 measured).
  if (running == cohort::PlanStrategy::kZero1 || running == cohort::PlanStrategy::kZero2) {
    measured.compute_s = 0;  // not measured: the first prediction stands
  }
  const cohort::Refit r =
      cohort::refit(choice.input.compute, choice.machine, choice.prediction, measured, kOffBy);
  COHORT_LOG(kInfo, "plan: after step ", record.step, " compute took ", r.compute_ratio * 100,
             "% and the gradient reductions ", r.link_ratio * 100, "% of the prediction");
  if (!r.off) return;
  cohort::PlannerOptions options = choice.options;
  options.strategies = {choice.prediction.config.strategy};  // a run keeps its strategy
  options.local_sgd_periods.clear();            // and its period: only the buckets may change
  options.memory_budget_bytes = 0;              // the memory is what it is by now
  options.baseline = choice.prediction.config;  // kept unless another size clearly wins
  cohort::Plan again = cohort::plan(choice.input.model, r.compute, r.machine, options);
  again.chosen = again.candidates[rank0_choice(group, again)];
  const double cap = again.chosen.config.bucket_cap_mb;
  const bool rebuilt = choice.local_sgd_period == 0 && cap != choice.bucket_cap_mb &&
                       strategy.rebucket(cap);  // local SGD reduces no gradients
  cohort::PlanConfig config = choice.prediction.config;
  if (rebuilt) config.bucket_cap_mb = choice.bucket_cap_mb = cap;
  choice.prediction = cohort::predict(choice.input.model, r.compute, r.machine, config);
  if (group.rank() == 0) {
    const std::string what = rebuilt
                                 ? "buckets of " + std::to_string(cap) + " MiB from the next step"
                                 : std::string("the configuration stays");
    std::printf(
        "plan: after step %lld the model was off (compute %.0f%%, gradient reductions "
        "%.0f%% of the prediction): refitted; %s (predicted step %.1f ms)\n",
        static_cast<long long>(record.step), r.compute_ratio * 100, r.link_ratio * 100,
        what.c_str(), choice.prediction.step_s * 1e3);
    std::fflush(stdout);
  }
}

void log_plan_accuracy(const PlanChoice& choice, const std::vector<StepRecord>& steps,
                       int64_t epoch, int64_t measured_peak_bytes) {
  // The first step builds buckets and optimizer state; PowerSGD's plain steps come before it
  // compresses.
  const int64_t last_left_out =
      choice.powersgd_rank > 0 ? std::max<int64_t>(1, choice.powersgd_start_iter) : 1;
  std::vector<double> step_ms;
  for (const auto& s : steps) {
    if (s.step > last_left_out) step_ms.push_back(s.step_ms - s.data_ms);
  }
  if (step_ms.empty()) return;
  // Local SGD's steps are unequal (one in a period averages): its prediction is their mean.
  const double measured_step_ms = choice.local_sgd_period > 0
                                      ? std::accumulate(step_ms.begin(), step_ms.end(), 0.0) /
                                            static_cast<double>(step_ms.size())
                                      : quantile(step_ms, 0.5);
  const double predicted = choice.prediction.step_s * 1e3;
  const double first = choice.first_prediction.step_s * 1e3;
  COHORT_LOG(kInfo, "plan: epoch ", epoch, ": measured ",
             choice.local_sgd_period > 0 ? "mean" : "median", " step ", measured_step_ms,
             " ms against ", predicted, " ms predicted for ", choice.prediction.config.describe(),
             " (", predicted > 0 ? (measured_step_ms / predicted - 1) * 100 : 0,
             "%); before the online correction ", first, " ms (",
             first > 0 ? (measured_step_ms / first - 1) * 100 : 0, "%); peak memory ",
             static_cast<double>(measured_peak_bytes) / (1024.0 * 1024.0), " MiB against ",
             static_cast<double>(choice.prediction.peak_memory_bytes) / (1024.0 * 1024.0),
             " MiB predicted");
}

int64_t optimizer_state_per_element(const std::string& optimizer, double momentum) {
  if (optimizer == "sgd")
    return momentum > 0 ? cohort::kMomentumStateBytes : cohort::kSgdStateBytes;
  if (optimizer == "lars") return cohort::kMomentumStateBytes;
  return cohort::kAdamStateBytes;  // adam, adamw, lamb
}

}  // namespace cohort_examples
