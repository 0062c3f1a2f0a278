// cohort::predict and cohort::plan (include/cohort/torch/plan/planner.h, docs/planner.md).
#include "cohort/torch/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "cohort/core/check.h"
#include "plan/step_model.h"

namespace cohort {
namespace {

// What cohort runs over master weights (ModelSpec::master_weights): DDP and the FSDP strategies
// (ZeRO's shards would be the 16-bit parameters themselves), with the gradients in the model's
// 16-bit dtype, without local SGD or PowerSGD.
bool runs_over_master_weights(const PlanConfig& config) {
  const bool zero =
      config.strategy == StrategyKind::kZero1 || config.strategy == StrategyKind::kZero2;
  return !zero && config.reduce_dtype == torch::kFloat32 && config.local_sgd_period == 0 &&
         config.powersgd_rank == 0;
}

void check_runnable(const ModelSpec& model, const MachineSpec& machine, const PlanConfig& config) {
  COHORT_CHECK(!model.parameters.empty(), "planner: the model has no trainable parameters");
  COHORT_CHECK(config.bucket_cap_mb > 0 && config.first_bucket_cap_mb > 0,
               "planner: bucket caps must be positive, got ", config.bucket_cap_mb, " and ",
               config.first_bucket_cap_mb);
  COHORT_CHECK(config.reduce_dtype == torch::kFloat32 || config.reduce_dtype == torch::kBFloat16,
               "planner: reduce_dtype must be float32 or bfloat16");
  COHORT_CHECK(config.local_sgd_period >= 0, "planner: local_sgd_period must be >= 0, got ",
               config.local_sgd_period);
  COHORT_CHECK(config.local_sgd_period == 0 || (config.strategy == StrategyKind::kDdp &&
                                                config.reduce_dtype == torch::kFloat32),
               "planner: local SGD runs under ddp with float32 gradients only");
  COHORT_CHECK(config.powersgd_rank >= 0, "planner: powersgd_rank must be >= 0, got ",
               config.powersgd_rank);
  COHORT_CHECK(config.powersgd_rank == 0 ||
                   (config.strategy == StrategyKind::kDdp &&
                    config.reduce_dtype == torch::kFloat32 && config.local_sgd_period == 0),
               "planner: PowerSGD runs under ddp with float32 gradients and without local SGD");
  COHORT_CHECK(!model.master_weights || runs_over_master_weights(config),
               "planner: master weights run under ddp and the FSDP strategies, not ZeRO, with "
               "the gradients in the model's 16-bit dtype (reduce_dtype float32), without local "
               "SGD or PowerSGD");
  const GroupShape& shape = machine.shape;
  COHORT_CHECK(
      config.strategy != StrategyKind::kHybridShard || (shape.nodes > 1 && shape.local_size > 1),
      "planner: hybrid_shard needs several nodes with the same number (> 1) of ranks "
      "each; this machine has ",
      shape.nodes, " node(s), ", shape.local_size, " rank(s) per node (0: unequal)");
}

std::string mebibytes(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

// DDP's first bucket sizes to try under `cap` (the larger first: equal times go to it); ZeRO's
// and FSDP's first bucket is not theirs to choose.
std::vector<double> first_bucket_caps(StrategyKind strategy, double cap,
                                      const PlannerOptions& options) {
  if (strategy != StrategyKind::kDdp) return {PlanConfig{}.first_bucket_cap_mb};
  std::vector<double> firsts;
  for (double first : options.first_bucket_caps_mb) {
    if (first <= cap) firsts.push_back(first);
  }
  if (firsts.empty()) firsts.push_back(cap);
  std::sort(firsts.begin(), firsts.end(), std::greater<>());
  return firsts;
}

// `model` already cut into the units `config` asks for.
Prediction predict_cut(const ModelSpec& model, const ComputeProfile& compute,
                       const MachineSpec& machine, const PlanConfig& config) {
  check_runnable(model, machine, config);
  const detail::StepTimes t = detail::predict_step(model, compute, machine, config);
  Prediction p;
  p.config = config;
  p.compute_s = t.compute_s;
  p.communication_s = t.communication_s;
  p.exposed_s = t.exposed_s;
  p.step_s = t.compute_s + t.exposed_s;
  p.shm_bytes = t.shm_bytes;
  p.network_bytes = t.network_bytes;
  p.peak_memory_bytes = detail::predict_peak_memory(model, compute, machine, config);
  p.reduction_s = t.reduction_s;
  return p;
}

// The model under each of its unit layouts, its own first (only its own unless the options
// search them).
std::vector<ModelSpec> unit_cuts(const ModelSpec& model, const PlannerOptions& options) {
  if (!options.search_fsdp_units) return {model};
  std::vector<ModelSpec> cuts;
  for (int64_t threshold : model.unit_layout_thresholds()) {
    cuts.push_back(model.with_units(threshold));
  }
  return cuts;
}

// How a strategy's parameters are cut and gathered: DDP and ZeRO have the model as it is; the
// FSDP strategies each unit layout, with prefetch and (where the options search) without.
struct UnitChoice {
  const ModelSpec* model;
  std::optional<int64_t> min_unit_parameters;
  bool prefetch = true;
};

std::vector<UnitChoice> fsdp_unit_choices(const std::vector<ModelSpec>& cuts,
                                          const PlannerOptions& options) {
  const std::vector<bool> prefetches = options.search_fsdp_units
                                           ? std::vector<bool>{true, false}
                                           : std::vector<bool>{options.fsdp_prefetch};
  std::vector<UnitChoice> choices;
  for (const ModelSpec& cut : cuts) {
    for (bool prefetch : prefetches) choices.push_back({&cut, cut.min_unit_parameters, prefetch});
  }
  return choices;
}

// How a strategy's gradients may travel: in each dtype allowed, and under DDP through PowerSGD
// at each rank allowed.
struct Reduction {
  torch::Dtype dtype = torch::kFloat32;
  int powersgd_rank = 0;
};

std::vector<Reduction> reductions(StrategyKind strategy, const PlannerOptions& options) {
  std::vector<Reduction> allowed;
  for (torch::Dtype dtype : options.reduce_dtypes) allowed.push_back({dtype, 0});
  if (strategy != StrategyKind::kDdp) return allowed;
  for (int rank : options.powersgd_ranks) allowed.push_back({torch::kFloat32, rank});
  return allowed;
}

// PlannerOptions::baseline: kept where it fits and the fastest is not predicted more than
// min_gain faster.
void keep_the_baseline_unless_beaten(Plan& plan, const PlannerOptions& options) {
  if (!options.baseline) return;
  const std::string name = options.baseline->describe();
  const auto baseline =
      std::find_if(plan.candidates.begin(), plan.candidates.end(),
                   [&](const Prediction& p) { return p.config.describe() == name; });
  if (baseline == plan.candidates.end() || !baseline->fits) return;
  if (plan.chosen.step_s > baseline->step_s * (1 - options.min_gain)) plan.chosen = *baseline;
}

}  // namespace

Prediction predict(const ModelSpec& model, const ComputeProfile& compute,
                   const MachineSpec& machine, const PlanConfig& config) {
  if (detail::uses_buckets(config.strategy) || !config.min_unit_parameters) {
    return predict_cut(model, compute, machine, config);
  }
  return predict_cut(model.with_units(*config.min_unit_parameters), compute, machine, config);
}

Refit refit(const ComputeProfile& compute, const MachineSpec& machine, const Prediction& predicted,
            const StepMeasurement& measured, double threshold) {
  Refit r{compute, machine, 1, 1, false};
  if (predicted.compute_s > 0 && measured.compute_s > 0) {
    r.compute_ratio = measured.compute_s / predicted.compute_s;
  }
  double predicted_s = 0, measured_s = 0;
  for (double s : predicted.reduction_s) predicted_s += s;
  for (double s : measured.reduction_s) measured_s += s;
  if (predicted_s > 0 && measured_s > 0) r.link_ratio = measured_s / predicted_s;
  r.compute.forward_s *= r.compute_ratio;
  r.compute.backward_s *= r.compute_ratio;
  r.compute.optimizer_s *= r.compute_ratio;
  for (LinkCost* link : {&r.machine.links.tcp, &r.machine.links.shm}) {
    link->alpha_s *= r.link_ratio;
    link->beta_s_per_byte *= r.link_ratio;
  }
  r.machine.links.gamma_s_per_byte *= r.link_ratio;
  r.off = std::abs(r.compute_ratio - 1) > threshold || std::abs(r.link_ratio - 1) > threshold;
  return r;
}

Plan plan(const ModelSpec& model, const ComputeProfile& compute, const MachineSpec& machine,
          const PlannerOptions& options) {
  const GroupShape& shape = machine.shape;
  const std::vector<ModelSpec> cuts = unit_cuts(model, options);
  const std::vector<UnitChoice> fsdp_choices = fsdp_unit_choices(cuts, options);
  const std::vector<UnitChoice> as_it_is = {{&model, std::nullopt, true}};
  Plan result;
  for (StrategyKind strategy : options.strategies) {
    if (strategy == StrategyKind::kHybridShard && (shape.nodes < 2 || shape.local_size < 2)) {
      continue;  // not on this machine
    }
    std::vector<double> caps = options.bucket_caps_mb;
    if (!detail::uses_buckets(strategy)) caps = {PlanConfig{}.bucket_cap_mb};
    std::sort(caps.begin(), caps.end(), std::greater<>());  // ties go to the larger bucket
    const auto consider = [&](const ModelSpec& cut, const PlanConfig& config) {
      if (model.master_weights && !runs_over_master_weights(config)) return;  // not a candidate
      Prediction p = predict_cut(cut, compute, machine, config);              // cut as config names
      p.fits =
          options.memory_budget_bytes <= 0 || p.peak_memory_bytes <= options.memory_budget_bytes;
      result.candidates.push_back(p);
    };
    for (double cap : caps) {
      for (double first : first_bucket_caps(strategy, cap, options)) {
        for (const Reduction& reduction : reductions(strategy, options)) {
          for (const UnitChoice& units : detail::uses_buckets(strategy) ? as_it_is : fsdp_choices) {
            PlanConfig config;
            config.strategy = strategy;
            config.bucket_cap_mb = cap;
            config.first_bucket_cap_mb = first;
            config.reduce_dtype = reduction.dtype;
            config.powersgd_rank = reduction.powersgd_rank;
            config.min_unit_parameters = units.min_unit_parameters;
            config.fsdp_prefetch = units.prefetch;
            consider(*units.model, config);
          }
        }
      }
    }
    for (int period :
         strategy == StrategyKind::kDdp ? options.local_sgd_periods : std::vector<int>{}) {
      PlanConfig config;  // no gradient buckets to size: the default cap
      config.local_sgd_period = period;
      consider(model, config);
    }
  }
  COHORT_CHECK(!result.candidates.empty(), "planner: no strategy allowed can run on this machine");
  // Fastest first; stable, so equal times keep the order of options.strategies and caps.
  std::stable_sort(result.candidates.begin(), result.candidates.end(),
                   [](const Prediction& a, const Prediction& b) { return a.step_s < b.step_s; });
  const auto fitting = std::find_if(result.candidates.begin(), result.candidates.end(),
                                    [](const Prediction& p) { return p.fits; });
  if (fitting == result.candidates.end()) {
    const auto smallest = std::min_element(result.candidates.begin(), result.candidates.end(),
                                           [](const Prediction& a, const Prediction& b) {
                                             return a.peak_memory_bytes < b.peak_memory_bytes;
                                           });
    COHORT_CHECK(false, "planner: no configuration fits the memory budget of ",
                 mebibytes(options.memory_budget_bytes), " MiB per rank; the smallest, ",
                 smallest->config.describe(), ", needs ", mebibytes(smallest->peak_memory_bytes),
                 " MiB: add ranks, allow more strategies, or raise the budget");
  }
  result.chosen = *fitting;
  keep_the_baseline_unless_beaten(result, options);
  return result;
}

std::string Plan::table(size_t rows) const {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "%-50s %9s %9s %9s %10s %10s %10s %s\n", "configuration",
                "step ms", "comm", "exposed", "peak MiB", "shm MiB", "net MiB", "fits");
  out << line;
  for (size_t i = 0; i < std::min(rows, candidates.size()); ++i) {
    const Prediction& p = candidates[i];
    std::snprintf(line, sizeof line, "%-50s %9.2f %9.2f %9.2f %10s %10s %10s %s%s\n",
                  p.config.describe().c_str(), p.step_s * 1e3, p.communication_s * 1e3,
                  p.exposed_s * 1e3, mebibytes(p.peak_memory_bytes).c_str(),
                  mebibytes(p.shm_bytes).c_str(), mebibytes(p.network_bytes).c_str(),
                  p.fits ? "yes" : "no",
                  p.config.describe() == chosen.config.describe() ? "  <- chosen" : "");
    out << line;
  }
  if (candidates.size() > rows) out << "(" << candidates.size() - rows << " more)\n";
  return out.str();
}

}  // namespace cohort
