// One training step of both examples through the strategy layer, timed as the --metrics
// records report it (step_metrics.h), with its spans on the timeline (docs/timeline.md).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "cohort/comm/timeline.h"
#include "cohort/torch/strategy/strategy.h"
#include "step_metrics.h"

namespace cohort_examples {

struct StepCalls {
  // This rank's loss on its batch, computed under strategy.forward_scope() by the caller.
  std::function<torch::Tensor()> loss;
  // After backward, inside the compute time (a slowed rank's wait): the ms the step took so far.
  std::function<void(double elapsed_ms)> after_backward;
  // Before the update, inside its time: clipping.
  std::function<void()> before_update;
  // After the update, inside the step's time: the scheduler's step, a time limit's agreement.
  std::function<void()> after_update;
};

// zero_grad, the forward, backward, the update: returns the step's record with its lr (the
// optimizer's first group's, as the scheduler set it), timings (`data_ms` is the batch's wait,
// counted in step_ms), loss, loss scale and communication figures; the caller sets epoch, step
// and samples. `step_number` (from 1) names the step's timeline span.
StepRecord timed_step(cohort::Strategy& strategy, torch::optim::Optimizer& optimizer,
                      cohort::Timeline* timeline, int64_t step_number, double data_ms,
                      const StepCalls& calls);

}  // namespace cohort_examples
