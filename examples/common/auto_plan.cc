#include "auto_plan.h"

#include <CLI/CLI.hpp>
#include <exception>

#include "strategy.h"

namespace cohort_examples {

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
      ->check(CLI::IsMember(known_strategy_names()));
  app.add_flag("--allow-local-sgd", settings.allow_local_sgd,
               "With --strategy auto or ddp: the planner may choose local SGD (a period of 2, 4, "
               "8 or 16 steps), which changes what training computes (docs/planner.md)");
  app.add_flag("--allow-powersgd", settings.allow_powersgd,
               "With --strategy auto or ddp: the planner may choose to reduce DDP's gradients "
               "through PowerSGD at --hook-rank (after --hook-start-iter plain steps), which "
               "changes what training computes (docs/planner.md)");
}

void apply_fsdp_settings(const PlanSettings& settings, int64_t default_min_unit_parameters,
                         cohort::StrategyOptions& wrapping) {
  wrapping.fsdp_min_unit_parameters =
      settings.fsdp_min_unit_parameters.value_or(default_min_unit_parameters);
  wrapping.fsdp_prefetch = !settings.fsdp_no_prefetch;
}

bool wants_plan(const std::string& strategy, const PlanSettings& settings) {
  return strategy == "auto" || settings.bucket_cap.automatic || settings.memory_budget_mb > 0 ||
         !settings.plan_out.empty() || settings.allow_local_sgd || settings.allow_powersgd ||
         !settings.strategies.empty();
}

cohort::RunPlanRequest plan_request(const std::string& strategy, const PlanSettings& settings,
                                    const cohort::StrategyOptions& wrapping,
                                    const CommHookSettings& hook) {
  cohort::RunPlanRequest request;
  if (strategy != "auto") request.strategy = strategy_kind(strategy);
  for (const auto& name : settings.strategies) request.strategies.push_back(strategy_kind(name));
  request.options = wrapping;
  request.automatic_buckets = settings.bucket_cap.automatic;
  request.automatic_fsdp_units = !settings.fsdp_min_unit_parameters && !settings.fsdp_no_prefetch;
  request.memory_budget_bytes = settings.memory_budget_mb * 1024 * 1024;
  request.allow_local_sgd = settings.allow_local_sgd;
  request.allow_powersgd = settings.allow_powersgd;
  request.powersgd.rank = hook.rank;
  request.powersgd.start_iter = hook.start_iter;
  request.runs_powersgd = hook.name == "powersgd";
  request.min_gain = settings.min_gain_percent / 100;
  request.plan_out = settings.plan_out;
  return request;
}

void correct_plan(cohort::Group& group, cohort::RunPlan& plan, const StepRecord& record,
                  cohort::Strategy& strategy) {
  cohort::StepCommunication communication;
  communication.exposed_ms = record.exposed_comm_ms;
  communication.bucket_comm_ms = record.bucket_comm_ms;
  cohort::correct_plan(group, plan, record.step, (record.step_ms - record.data_ms) * 1e-3,
                       communication, strategy);
}

void log_plan_accuracy(const cohort::RunPlan& plan, const std::vector<StepRecord>& steps,
                       int64_t epoch, int64_t measured_peak_bytes) {
  std::vector<cohort::StepTime> times;
  for (const auto& s : steps) times.push_back({s.step, (s.step_ms - s.data_ms) * 1e-3});
  cohort::log_plan_accuracy(plan, times, measured_peak_bytes, "epoch " + std::to_string(epoch));
}

int64_t optimizer_state_per_element(const std::string& optimizer, double momentum) {
  if (optimizer == "sgd")
    return momentum > 0 ? cohort::kMomentumStateBytes : cohort::kSgdStateBytes;
  if (optimizer == "lars") return cohort::kMomentumStateBytes;
  return cohort::kAdamStateBytes;  // adam, adamw, lamb
}

}  // namespace cohort_examples
