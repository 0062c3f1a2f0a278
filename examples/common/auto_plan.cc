#include "auto_plan.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cohort/core/check.h"
#include "cohort/core/logging.h"
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

cohort::PlannerOptions planner_options(const PlanRequest& request) {
  cohort::PlannerOptions options;
  options.memory_budget_bytes = request.settings.memory_budget_mb * 1024 * 1024;
  options.strategies.clear();
  if (request.strategy == "auto") {
    for (const auto& name : request.allowed) options.strategies.push_back(plan_strategy(name));
  } else {
    options.strategies.push_back(plan_strategy(request.strategy));
  }
  if (!request.settings.bucket_cap.automatic) {
    options.bucket_caps_mb = {request.settings.bucket_cap.mebibytes};
  }
  return options;
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
}

bool wants_plan(const PlanRequest& request) {
  return request.strategy == "auto" || request.settings.bucket_cap.automatic ||
         request.settings.memory_budget_mb > 0 || !request.settings.plan_out.empty();
}

PlanChoice choose_configuration(cohort::Group& group, torch::nn::Module& model,
                                const PlanRequest& request) {
  COHORT_CHECK(request.probe && request.probe_step, "choose_configuration: no probe step");
  const auto spec = cohort::ModelSpec::of(model, request.optimizer_state_per_element,
                                          request.fsdp_min_unit_parameters);
  auto compute = cohort::ComputeProfile::measure(*request.probe, request.probe_step);
  compute.agree(group);
  const auto machine = cohort::MachineSpec::of(group);
  if (group.rank() == 0 && !request.settings.plan_out.empty()) {
    std::ofstream out(request.settings.plan_out);
    out << cohort::PlanInput{spec, compute}.to_json();
    if (!out) {
      throw cohort::InvalidArgument("--plan-out: cannot write " + request.settings.plan_out);
    }
  }
  const cohort::PlannerOptions options = planner_options(request);
  cohort::Plan plan = cohort::plan(spec, compute, machine, options);
  plan.chosen = plan.candidates[rank0_choice(group, plan)];
  PlanChoice choice;
  choice.strategy = cohort::plan_strategy_name(plan.chosen.config.strategy);
  choice.bucket_cap_mb = plan.chosen.config.bucket_cap_mb;
  choice.prediction = choice.first_prediction = plan.chosen;
  choice.input = {spec, compute};
  choice.machine = machine;
  choice.options = options;
  if (group.rank() == 0) {
    COHORT_LOG(kInfo, "plan: compute forward ", compute.forward_s * 1e3, " ms, backward ",
               compute.backward_s * 1e3, " ms, optimizer ", compute.optimizer_s * 1e3,
               " ms; links: ", machine.links.source, "\n", plan.table(plan.candidates.size()));
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

// The median over the steps measured of the compute and of the reductions' total, the slowest
// rank's (every rank refits alike).
cohort::StepMeasurement agreed_measurement(cohort::Group& group,
                                           const std::vector<cohort::StepMeasurement>& steps) {
  std::vector<double> compute, reductions;
  for (const auto& s : steps) {
    compute.push_back(s.compute_s);
    double total = 0;
    for (double r : s.reduction_s) total += r;
    reductions.push_back(total);
  }
  auto figures =
      torch::tensor({quantile(compute, 0.5), quantile(reductions, 0.5)}, torch::kFloat64);
  cohort::CollectiveOptions max;
  max.op = cohort::ReduceOp::kMax;
  group.allreduce(cohort::tensor_buffer(figures), max);
  cohort::StepMeasurement agreed;
  agreed.compute_s = figures[0].item<double>();
  agreed.reduction_s = {figures[1].item<double>()};
  return agreed;
}

}  // namespace

void correct_plan(cohort::Group& group, PlanChoice& choice, const StepRecord& record,
                  Strategy& strategy) {
  if (choice.corrected || record.step < kFirstMeasuredStep) return;
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
  if (choice.prediction.config.strategy != cohort::PlanStrategy::kDdp) measured.reduction_s.clear();
  const cohort::Refit r =
      cohort::refit(choice.input.compute, choice.machine, choice.prediction, measured, kOffBy);
  COHORT_LOG(kInfo, "plan: after step ", record.step, " compute took ", r.compute_ratio * 100,
             "% and the gradient reductions ", r.link_ratio * 100, "% of the prediction");
  if (!r.off) return;
  cohort::PlannerOptions options = choice.options;
  options.strategies = {choice.prediction.config.strategy};  // a run keeps its strategy
  options.memory_budget_bytes = 0;                           // the memory is what it is by now
  cohort::Plan again = cohort::plan(choice.input.model, r.compute, r.machine, options);
  again.chosen = again.candidates[rank0_choice(group, again)];
  const double cap = again.chosen.config.bucket_cap_mb;
  const bool rebuilt = cap != choice.bucket_cap_mb && strategy.rebucket(cap);
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
  std::vector<double> step_ms;
  for (const auto& s : steps) {
    if (s.step > 1) step_ms.push_back(s.step_ms - s.data_ms);
  }
  if (step_ms.empty()) return;
  const double measured_step_ms = quantile(step_ms, 0.5);
  const double predicted = choice.prediction.step_s * 1e3;
  const double first = choice.first_prediction.step_s * 1e3;
  COHORT_LOG(kInfo, "plan: epoch ", epoch, ": measured median step ", measured_step_ms,
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
