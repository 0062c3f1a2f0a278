// correct_plan and log_plan_accuracy (cohort/torch/plan/run_plan.h): the run's first steps
// against the prediction, and the buckets planned again where it was off.
#include <algorithm>
#include <cstdio>
#include <numeric>

#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"
#include "plan/run_plan_internal.h"

namespace cohort {
namespace {

constexpr int64_t kFirstMeasuredStep = 2;  // the first builds buckets and optimizer state
constexpr int64_t kCorrectionStep = 4;
constexpr double kOffBy = 0.25;

// The median over the steps measured of the compute, the slowest rank's, and of the reductions'
// total, the fastest rank's (every rank refits alike). A reduction's time runs from when this
// rank started it, so a rank that got there first also counts its wait for the last: the last
// to start times the wire alone (on 2 hosts x 2 ranks at 100 Mbit/s, the slowest rank's was
// 130% of the prediction while the exposed communication was within 6% of it).
StepMeasurement agreed_measurement(Group& group, const std::vector<StepMeasurement>& steps) {
  std::vector<double> compute, reductions;
  for (const auto& s : steps) {
    compute.push_back(s.compute_s);
    double total = 0;
    for (double r : s.reduction_s) total += r;
    reductions.push_back(total);
  }
  auto figures =  // the maximum of minus the reductions is minus their minimum
      torch::tensor({plan_detail::lower_median(compute), -plan_detail::lower_median(reductions)},
                    torch::kFloat64);
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  group.allreduce(tensor_buffer(figures), max);
  StepMeasurement agreed;
  agreed.compute_s = figures[0].item<double>();
  agreed.reduction_s = {-figures[1].item<double>()};
  return agreed;
}

void say_the_correction(const RunPlan& plan, int64_t step, const Refit& r, bool rebuilt,
                        double cap) {
  const std::string what = rebuilt ? "buckets of " + std::to_string(cap) + " MiB from the next step"
                                   : std::string("the configuration stays");
  std::printf(
      "plan: after step %lld the model was off (compute %.0f%%, gradient reductions %.0f%% of "
      "the prediction): refitted; %s (predicted step %.1f ms)\n",
      static_cast<long long>(step), r.compute_ratio * 100, r.link_ratio * 100, what.c_str(),
      plan.prediction.step_s * 1e3);
  std::fflush(stdout);
}

}  // namespace

namespace plan_detail {

size_t rank0_choice(Group& group, const Plan& plan) {
  size_t index = 0;
  while (plan.candidates[index].config.describe() != plan.chosen.config.describe()) ++index;
  auto chosen = torch::tensor({static_cast<int64_t>(index)}, torch::kInt64);
  group.broadcast(tensor_buffer(chosen), CollectiveOptions{});
  return static_cast<size_t>(chosen.item<int64_t>());
}

double lower_median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[(values.size() - 1) / 2];
}

}  // namespace plan_detail

void correct_plan(Group& group, RunPlan& plan, int64_t step, double step_s,
                  const StepCommunication& communication, Strategy& strategy) {
  // PowerSGD's first steps are plain allreduces: nothing to compare.
  if (plan.corrected || plan.powersgd_rank > 0 || step < kFirstMeasuredStep) return;
  StepMeasurement measured_step;
  measured_step.compute_s = step_s - communication.exposed_ms * 1e-3;
  for (double ms : communication.bucket_comm_ms) measured_step.reduction_s.push_back(ms * 1e-3);
  plan.measured.push_back(measured_step);
  if (step < kCorrectionStep) return;
  plan.corrected = true;
  StepMeasurement measured = agreed_measurement(group, plan.measured);
  // The reductions of ZeRO and FSDP run beside compute for the same cores here and measure
  // slower than their links, while their all-gathers, which wait on the step, do not: scaling
  // the links by them overshoots. Only DDP's, whose buckets are what a correction changes,
  // refit the links.
  const StrategyKind running = plan.prediction.config.strategy;
  if (running != StrategyKind::kDdp) measured.reduction_s.clear();
  // ZeRO's optimizer step waits for its all-gathers, which the step record counts as compute
  // (its exposed communication is backward's wait): scaled by them, the compute would overshoot
  // (fashion_mnist on 2 hosts x 2 ranks at 100 Mbit/s: 922 ms corrected against 704 measured).
  if (is_zero(running)) measured.compute_s = 0;  // not measured: the first prediction stands
  const Refit r = refit(plan.input.compute, plan.machine, plan.prediction, measured, kOffBy);
  COHORT_LOG(kInfo, "plan: after step ", step, " compute took ", r.compute_ratio * 100,
             "% and the gradient reductions ", r.link_ratio * 100, "% of the prediction");
  if (!r.off) return;
  PlannerOptions options = plan.planner;
  options.strategies = {plan.prediction.config.strategy};  // a run keeps its strategy
  options.local_sgd_periods.clear();          // and its period: only the buckets may change
  options.memory_budget_bytes = 0;            // the memory is what it is by now
  options.baseline = plan.prediction.config;  // kept unless another size clearly wins
  Plan again = cohort::plan(plan.input.model, r.compute, r.machine, options);
  again.chosen = again.candidates[plan_detail::rank0_choice(group, again)];
  const double cap = again.chosen.config.bucket_cap_mb;
  const bool rebuilt = plan.local_sgd_period == 0 && cap != plan.bucket_cap_mb &&
                       strategy.rebucket(cap);  // local SGD reduces no gradients
  PlanConfig config = plan.prediction.config;
  if (rebuilt) config.bucket_cap_mb = plan.bucket_cap_mb = cap;
  plan.prediction = predict(plan.input.model, r.compute, r.machine, config);
  if (group.rank() == 0) say_the_correction(plan, step, r, rebuilt, cap);
}

void log_plan_accuracy(const RunPlan& plan, const std::vector<StepTime>& steps,
                       int64_t measured_peak_bytes, const std::string& when) {
  // The first step builds buckets and optimizer state; PowerSGD's plain steps come before it
  // compresses.
  const int64_t last_left_out =
      plan.powersgd_rank > 0 ? std::max<int64_t>(1, plan.powersgd_start_iter) : 1;
  std::vector<double> step_ms;
  for (const auto& s : steps) {
    if (s.step > last_left_out) step_ms.push_back(s.seconds * 1e3);
  }
  if (step_ms.empty()) return;
  // Local SGD's steps are unequal (one in a period averages): its prediction is their mean.
  const bool mean = plan.local_sgd_period > 0;
  const double measured_step_ms = mean ? std::accumulate(step_ms.begin(), step_ms.end(), 0.0) /
                                             static_cast<double>(step_ms.size())
                                       : plan_detail::lower_median(step_ms);
  const double predicted = plan.prediction.step_s * 1e3;
  const double first = plan.first_prediction.step_s * 1e3;
  COHORT_LOG(
      kInfo, "plan: ", when, ": measured ", mean ? "mean" : "median", " step ", measured_step_ms,
      " ms against ", predicted, " ms predicted for ", plan.prediction.config.describe(), " (",
      predicted > 0 ? (measured_step_ms / predicted - 1) * 100 : 0,
      "%); before the online correction ", first, " ms (",
      first > 0 ? (measured_step_ms / first - 1) * 100 : 0, "%); peak memory ",
      static_cast<double>(measured_peak_bytes) / (1024.0 * 1024.0), " MiB against ",
      static_cast<double>(plan.prediction.peak_memory_bytes) / (1024.0 * 1024.0), " MiB predicted");
}

}  // namespace cohort
