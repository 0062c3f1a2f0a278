// ComputeProfile::measure, ::measure_sharded, ::measure_powersgd and ::agree
// (include/cohort/torch/plan/planner.h).
#include <algorithm>
#include <chrono>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/plan/planner.h"
#include "cohort/torch/tensor_buffer.h"
#include "cohort/torch/tensor_memory.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWarmUpSteps = 3;

double seconds(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// One step's timings: the gradient hooks mark backward's start (the first to fire) and end
// (the last), and each parameter's ready time.
struct StepTiming {
  double forward = 0, backward = 0, optimizer = 0;
  std::vector<double> ready;  // fractions of backward
  int64_t allocated = 0;      // the step's peak CPU tensor bytes above what it started with
};

StepTiming time_step(const std::vector<torch::Tensor>& parameters,
                     const std::function<void()>& step) {
  std::vector<Clock::time_point> at(parameters.size());
  std::vector<unsigned> hooks;
  for (size_t i = 0; i < parameters.size(); ++i) {
    hooks.push_back(parameters[i].register_hook([&at, i](const torch::Tensor&) {
      at[i] = Clock::now();  // returns nothing: the gradient goes on as it is, uncopied
    }));
  }
  const bool tracking = tracking_cpu_tensor_memory();
  const int64_t before = tracking ? cpu_tensor_bytes() : 0;
  if (tracking) reset_peak_cpu_tensor_bytes();
  const auto start = Clock::now();
  step();
  const auto end = Clock::now();
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].remove_hook(hooks[i]);
  const auto first = *std::min_element(at.begin(), at.end());
  const auto last = *std::max_element(at.begin(), at.end());
  COHORT_CHECK(first > start, "ComputeProfile::measure: the step computed no gradients");
  StepTiming t{seconds(start, first), seconds(first, last), seconds(last, end), {}, 0};
  for (const auto& ready : at) {
    t.ready.push_back(t.backward > 0 ? seconds(first, ready) / t.backward : 1.0);
  }
  if (tracking) t.allocated = std::max<int64_t>(0, peak_cpu_tensor_bytes() - before);
  return t;
}

// The PowerSGD costs are averaged by position: every rank must have measured the same ranks in
// the same order (equal maxima of the ranks and of their negatives). Collective.
void check_same_powersgd_ranks(Group& group, const std::vector<PowerSgdCost>& powersgd) {
  if (powersgd.empty()) return;  // the same on every rank: agree() checked the lengths
  std::vector<int64_t> ranks;
  for (const auto& cost : powersgd) ranks.push_back(cost.rank);
  for (const auto& cost : powersgd) ranks.push_back(-cost.rank);
  auto extremes = torch::tensor(ranks, torch::kInt64);
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  group.allreduce(tensor_buffer(extremes), max);
  const auto count = static_cast<int64_t>(powersgd.size());
  COHORT_CHECK(torch::equal(extremes.narrow(0, 0, count), -extremes.narrow(0, count, count)),
               "ComputeProfile::agree: the ranks measured PowerSGD at different ranks "
               "(measure_powersgd the same ranks, in the same order, on every rank)");
}

}  // namespace

ComputeProfile ComputeProfile::measure(torch::nn::Module& module, const std::function<void()>& step,
                                       int steps) {
  COHORT_CHECK(steps >= 1, "ComputeProfile::measure: steps must be >= 1, got ", steps);
  std::vector<torch::Tensor> parameters;
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) parameters.push_back(p);
  }
  COHORT_CHECK(!parameters.empty(),
               "ComputeProfile::measure: the module has no trainable parameters");
  // Warm-up: first-touch allocations, the optimizer's state, and the allocator's thresholds,
  // which settle over the first few steps (the first steps of a run are slower for it).
  for (int warm = 0; warm < kWarmUpSteps; ++warm) time_step(parameters, step);
  std::vector<StepTiming> timings;
  for (int s = 0; s < steps; ++s) timings.push_back(time_step(parameters, step));
  ComputeProfile profile;
  std::vector<double> forward, backward, optimizer;
  for (const auto& t : timings) {
    forward.push_back(t.forward);
    backward.push_back(t.backward);
    optimizer.push_back(t.optimizer);
    profile.activation_bytes = std::max(profile.activation_bytes, t.allocated);
  }
  profile.forward_s = median(forward);
  profile.backward_s = median(backward);
  profile.optimizer_s = median(optimizer);
  for (size_t i = 0; i < parameters.size(); ++i) {
    std::vector<double> ready;
    for (const auto& t : timings) ready.push_back(t.ready[i]);
    profile.gradient_ready.push_back(median(ready));
  }
  return profile;
}

void ComputeProfile::measure_sharded(const std::function<void()>& sharded_step, int steps) {
  COHORT_CHECK(steps >= 1, "ComputeProfile::measure_sharded: steps must be >= 1, got ", steps);
  COHORT_CHECK(forward_s + backward_s > 0,
               "ComputeProfile::measure_sharded: measure() the plain step first");
  const auto time = [&] {
    const auto start = Clock::now();
    sharded_step();
    return seconds(start, Clock::now());
  };
  for (int warm = 0; warm < kWarmUpSteps; ++warm) time();
  std::vector<double> totals;
  for (int s = 0; s < steps; ++s) totals.push_back(time());
  sharded_compute_ratio = std::max(1.0, (median(totals) - optimizer_s) / (forward_s + backward_s));
}

void ComputeProfile::measure_powersgd(int rank, const std::function<void()>& plain_step,
                                      const std::function<void()>& powersgd_step, int steps) {
  COHORT_CHECK(rank >= 1, "ComputeProfile::measure_powersgd: rank must be >= 1, got ", rank);
  COHORT_CHECK(steps >= 1, "ComputeProfile::measure_powersgd: steps must be >= 1, got ", steps);
  const auto time = [](const std::function<void()>& step) {
    const auto start = Clock::now();
    step();
    return seconds(start, Clock::now());
  };
  // In turns, so that a slow spell of a shared machine falls on both alike.
  std::vector<double> differences;
  for (int s = 0; s < kWarmUpSteps + steps; ++s) {
    const double plain = time(plain_step);
    const double compressed = time(powersgd_step);
    if (s >= kWarmUpSteps) differences.push_back(compressed - plain);
  }
  const double added = std::max(0.0, median(differences));
  const auto measured = std::find_if(powersgd.begin(), powersgd.end(),
                                     [rank](const PowerSgdCost& c) { return c.rank == rank; });
  if (measured != powersgd.end()) {
    measured->seconds = added;
  } else {
    powersgd.push_back({rank, added});
  }
}

double ComputeProfile::powersgd_s(int rank) const {
  for (const auto& cost : powersgd) {
    if (cost.rank == rank) return cost.seconds;
  }
  throw InvalidArgument("planner: PowerSGD at rank " + std::to_string(rank) +
                        " was not measured (ComputeProfile::measure_powersgd)");
}

void ComputeProfile::agree(Group& group) {
  // A step waits for every rank at its collectives, so it runs at the slowest rank's pace (the
  // online correction takes the slowest rank's compute too): the times, like the activations,
  // are the ranks' largest; the ready fractions and FSDP's ratio their mean.
  std::vector<double> largest = {forward_s, backward_s, optimizer_s,
                                 static_cast<double>(activation_bytes)};
  for (const auto& cost : powersgd) largest.push_back(cost.seconds);
  std::vector<double> averaged = {sharded_compute_ratio};
  averaged.insert(averaged.end(), gradient_ready.begin(), gradient_ready.end());
  const auto count = static_cast<int64_t>(largest.size() + averaged.size());
  auto lengths = torch::tensor({count, -count}, torch::kInt64);  // the longest, minus the shortest
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  group.allreduce(tensor_buffer(lengths), max);
  COHORT_CHECK(lengths[0].item<int64_t>() == -lengths[1].item<int64_t>(),
               "ComputeProfile::agree: the ranks measured models of different parameter counts");
  check_same_powersgd_ranks(group, powersgd);
  auto maxima = torch::tensor(largest, torch::kFloat64);
  group.allreduce(tensor_buffer(maxima), max);
  CollectiveOptions mean;
  mean.op = ReduceOp::kAvg;
  auto means = torch::tensor(averaged, torch::kFloat64);
  group.allreduce(tensor_buffer(means), mean);
  const double* m = maxima.data_ptr<double>();
  forward_s = m[0];
  backward_s = m[1];
  optimizer_s = m[2];
  activation_bytes = static_cast<int64_t>(m[3]);
  for (size_t i = 0; i < powersgd.size(); ++i) powersgd[i].seconds = m[4 + i];
  const double* a = means.data_ptr<double>();
  sharded_compute_ratio = a[0];
  gradient_ready.assign(a + 1, a + 1 + gradient_ready.size());
}

}  // namespace cohort
