#include "auto_plan.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "cohort/core/check.h"
#include "cohort/core/logging.h"

namespace cohort_examples {
namespace {

const std::vector<std::pair<std::string, cohort::PlanStrategy>> kPlanNames = {
    {"ddp", cohort::PlanStrategy::kDdp},
    {"zero1", cohort::PlanStrategy::kZero1},
    {"zero2", cohort::PlanStrategy::kZero2},
    {"full_shard", cohort::PlanStrategy::kFullShard},
    {"shard_grad_op", cohort::PlanStrategy::kShardGradOp},
    {"hybrid_shard", cohort::PlanStrategy::kHybridShard}};

cohort::PlanStrategy plan_strategy(const std::string& name) {
  for (const auto& [text, strategy] : kPlanNames) {
    if (text == name) return strategy;
  }
  COHORT_CHECK(false, "--strategy ", name, " has no planner counterpart");
  return cohort::PlanStrategy::kDdp;
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
  const cohort::Plan plan = cohort::plan(spec, compute, machine, planner_options(request));
  PlanChoice choice;
  choice.strategy = cohort::plan_strategy_name(plan.chosen.config.strategy);
  choice.bucket_cap_mb = plan.chosen.config.bucket_cap_mb;
  choice.prediction = plan.chosen;
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

void log_plan_accuracy(const PlanChoice& choice, const std::vector<StepRecord>& steps,
                       int64_t epoch) {
  std::vector<double> step_ms;
  for (const auto& s : steps) {
    if (s.step > 1) step_ms.push_back(s.step_ms - s.data_ms);
  }
  if (step_ms.empty()) return;
  const double measured_step_ms = quantile(step_ms, 0.5);
  const double predicted = choice.prediction.step_s * 1e3;
  COHORT_LOG(kInfo, "plan: epoch ", epoch, ": measured median step ", measured_step_ms,
             " ms against ", predicted, " ms predicted for ", choice.prediction.config.describe(),
             " (", predicted > 0 ? (measured_step_ms / predicted - 1) * 100 : 0, "%)");
}

int64_t optimizer_state_per_element(const std::string& optimizer, double momentum) {
  if (optimizer == "sgd")
    return momentum > 0 ? cohort::kMomentumStateBytes : cohort::kSgdStateBytes;
  if (optimizer == "lars") return cohort::kMomentumStateBytes;
  return cohort::kAdamStateBytes;  // adam, adamw, lamb
}

}  // namespace cohort_examples
