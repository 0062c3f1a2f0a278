#include "timed_step.h"

#include <chrono>
#include <string>

namespace cohort_examples {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

StepRecord timed_step(cohort::Strategy& strategy, torch::optim::Optimizer& optimizer,
                      cohort::Timeline* timeline, int64_t step_number, double data_ms,
                      const StepCalls& calls) {
  using cohort::trace;
  StepRecord r;
  auto step_span = trace(timeline, "step " + std::to_string(step_number), "step", "steps");
  const Clock::time_point start = Clock::now();
  r.lr = optimizer.param_groups()[0].options().get_lr();
  strategy.zero_grad(optimizer);
  torch::Tensor loss;
  {
    auto span = trace(timeline, "forward");
    loss = calls.loss();
  }
  r.forward_ms = ms_since(start);
  {
    auto span = trace(timeline, "backward");
    strategy.backward(loss);
  }
  if (calls.after_backward) calls.after_backward(ms_since(start));
  r.backward_ms = ms_since(start) - r.forward_ms;
  {
    auto span = trace(timeline, "optimizer step");
    if (calls.before_update) calls.before_update();
    r.loss_scale =
        strategy.precision().scaler().get_scale();  // what this step's loss was scaled by
    strategy.step(optimizer);
    if (calls.after_update) calls.after_update();
  }
  r.step_ms = ms_since(start) + data_ms;
  r.optimizer_ms = r.step_ms - data_ms - r.forward_ms - r.backward_ms;
  r.data_ms = data_ms;
  r.loss = loss.item<double>();
  const cohort::StepCommunication comm = strategy.last_step_communication();
  r.exposed_comm_ms = comm.exposed_ms;
  r.bucket_latency_ms = comm.bucket_latency_ms;
  r.bucket_comm_ms = comm.bucket_comm_ms;
  r.reduced_bytes = comm.reduced_bytes;
  return r;
}

}  // namespace cohort_examples
