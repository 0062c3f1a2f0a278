// Learning-rate schedules for large-batch training: the linear scaling rule, and a linear
// warm-up chained with a decay (constant, step, cosine or polynomial) as a torch::optim
// scheduler that checkpoints save and restore (TrainingState::lr_scheduler).
//
//   const double lr = cohort::optim::linear_scaled_lr(0.01, 64, global_batch);
//   torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(lr).momentum(0.9));
//   cohort::optim::LrScheduleOptions schedule;
//   schedule.warmup_steps = 200;
//   schedule.decay = cohort::optim::LrDecay::kCosine;
//   schedule.total_steps = epochs * steps_per_epoch;
//   cohort::optim::WarmupDecayLR scheduler(optimizer, schedule);  // sets step 0's LR
//   for (...) { ...; optimizer.step(); scheduler.step(); }       // then the next step's
//
// docs/large_batch.md, "Learning-rate schedules and the linear scaling rule".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace cohort::optim {

// Goyal et al.'s linear scaling rule: base_lr was tuned at base_batch; a global batch k times
// larger takes a learning rate k times larger. Throws InvalidArgument when base_lr is not a
// positive finite number or either batch is not positive.
double linear_scaled_lr(double base_lr, int64_t base_batch, int64_t global_batch);

// What follows the warm-up. Every decay counts its steps from the end of the warm-up
// (d = step - warmup_steps), starting from the group's base LR.
enum class LrDecay {
  kConstant,    // the base LR
  kStep,        // base * gamma^floor(d / step_size)
  kCosine,      // from base to the end LR along half a cosine, over total_steps - warmup_steps
  kPolynomial,  // end + (base - end) * (1 - d / D)^power, D = total_steps - warmup_steps
};

struct LrScheduleOptions {
  // Steps of linear warm-up (0: none). Step s < warmup_steps (from 0) runs at
  //   base * (f + (1 - f) * (s + 1) / warmup_steps),  f = warmup_start_factor,
  // so the ramp climbs from f * base in equal steps and its last step runs at the base LR
  // (with f = 0 the first step runs at base / warmup_steps, never at 0).
  int64_t warmup_steps = 0;
  double warmup_start_factor = 0.0;  // in [0, 1]
  LrDecay decay = LrDecay::kConstant;
  // kCosine, kPolynomial: the steps of the whole run, warm-up included; the decay reaches the
  // end LR at step total_steps and stays there. Must be >= warmup_steps.
  int64_t total_steps = 0;
  // kStep: the LR is multiplied by gamma (> 0) every step_size (> 0) steps after the warm-up.
  int64_t step_size = 0;
  double gamma = 0.1;
  // kCosine, kPolynomial: the end LR, as a part of each group's base LR (in [0, 1])...
  double end_factor = 0.0;
  // ...or, when >= 0, the same absolute end LR for every group (end_factor is then unused).
  double end_lr = -1.0;
  double power = 1.0;  // kPolynomial (> 0; 1 is a straight line)

  // Throws InvalidArgument naming the option and what to do when the options are inconsistent.
  void validate() const;
};

// The learning rate of step `step` (from 0) for a group whose base LR is `base_lr`: a pure
// function of its arguments. Throws InvalidArgument for invalid options or a negative step.
double scheduled_lr(const LrScheduleOptions& options, double base_lr, int64_t step);

// What a checkpoint keeps of a WarmupDecayLR (TrainingState::lr_scheduler saves and restores it).
struct LrSchedulerState {
  int64_t step = 0;              // scheduler steps taken
  std::vector<double> base_lrs;  // one per param group
  // What WarmupDecayLR::load_state accepts apart from the number of groups (and what
  // checkpoints check before loading anything).
  bool valid() const;
};

// A torch::optim::LRScheduler: every param group's LR follows scheduled_lr() from the group's own
// base LR, which is the group's LR when the scheduler is made (so groups with different LRs,
// e.g. without weight decay or with LARS exclusions, keep their ratios). The constructor sets
// step 0's LR; each step() (after optimizer.step(), as in PyTorch) sets the next step's. After n
// step()s the groups hold lr_at(n).
class WarmupDecayLR : public torch::optim::LRScheduler {
 public:
  // Throws InvalidArgument for invalid options, or an optimizer without param groups.
  WarmupDecayLR(torch::optim::Optimizer& optimizer, LrScheduleOptions options);

  // The LR of step `step` (from 0) for param group `group`, without changing anything.
  double lr_at(int64_t step, size_t group = 0) const;
  // Steps taken: the groups hold lr_at(step_count()).
  int64_t step_count() const { return static_cast<int64_t>(step_count_); }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  const LrScheduleOptions& options() const { return options_; }

  LrSchedulerState state() const;
  // Takes the saved step count and base LRs and sets every group's LR to lr_at(state.step).
  // Throws InvalidArgument for an invalid state or one for another number of param groups.
  void load_state(const LrSchedulerState& state);

 protected:
  std::vector<double> get_lrs() override;  // called by step() before it counts the step

 private:
  void apply(int64_t step);

  torch::optim::Optimizer& optimizer_;
  LrScheduleOptions options_;
  std::vector<double> base_lrs_;
};

}  // namespace cohort::optim
