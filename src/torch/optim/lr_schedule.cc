#include "cohort/torch/optim/lr_schedule.h"

#include <cmath>
#include <utility>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort::optim {
namespace {

using cohort::detail::concat;

constexpr double kPi = 3.14159265358979323846;

[[noreturn]] void reject(const std::string& what) {
  throw InvalidArgument("LrScheduleOptions: " + what);
}

bool needs_total(LrDecay decay) {
  return decay == LrDecay::kCosine || decay == LrDecay::kPolynomial;
}

bool is_fraction(double x) {
  return std::isfinite(x) && x >= 0.0 && x <= 1.0;
}

// The LR the decay ends at for a group of base LR `base`.
double end_of(const LrScheduleOptions& o, double base) {
  return o.end_lr >= 0 ? o.end_lr : base * o.end_factor;
}

// Half a cosine from 1 to 0 over `length` steps (0 at and after it).
double cosine_part(int64_t d, int64_t length) {
  if (d >= length) return 0.0;
  const double done = double(d) / double(length);
  return 0.5 * (1.0 + std::cos(kPi * done));
}

double polynomial_part(int64_t d, int64_t length, double power) {
  if (d >= length) return 0.0;
  return std::pow(1.0 - double(d) / double(length), power);
}

// d: steps since the end of the warm-up (>= 0).
double decayed(const LrScheduleOptions& o, double base, int64_t d) {
  const int64_t length = o.total_steps - o.warmup_steps;
  switch (o.decay) {
    case LrDecay::kConstant: return base;
    case LrDecay::kStep: return base * std::pow(o.gamma, double(d / o.step_size));
    case LrDecay::kCosine:
      // The factor form as base * (...), so that a run that used to compute it this way (the
      // examples) gets the same numbers to the last bit.
      if (o.end_lr < 0) {
        return base * (o.end_factor + (1.0 - o.end_factor) * cosine_part(d, length));
      }
      return o.end_lr + (base - o.end_lr) * cosine_part(d, length);
    case LrDecay::kPolynomial: {
      const double end = end_of(o, base);
      return end + (base - end) * polynomial_part(d, length, o.power);
    }
  }
  COHORT_INTERNAL_ASSERT(false, "unknown LrDecay");
  return base;
}

}  // namespace

double linear_scaled_lr(double base_lr, int64_t base_batch, int64_t global_batch) {
  COHORT_CHECK(std::isfinite(base_lr) && base_lr > 0, "linear_scaled_lr: base_lr is ", base_lr,
               "; pass the positive learning rate tuned at base_batch");
  COHORT_CHECK(base_batch > 0 && global_batch > 0, "linear_scaled_lr: the batches are ", base_batch,
               " (base) and ", global_batch, " (global); both must be positive");
  return base_lr * double(global_batch) / double(base_batch);
}

void LrScheduleOptions::validate() const {
  if (warmup_steps < 0) {
    reject(concat("warmup_steps is ", warmup_steps, "; use 0 for no warm-up"));
  }
  if (!is_fraction(warmup_start_factor)) {
    reject(concat("warmup_start_factor is ", warmup_start_factor,
                  "; the warm-up starts from this part of the LR, in [0, 1]"));
  }
  if (decay == LrDecay::kStep) {
    if (step_size <= 0) {
      reject(concat("step decay with step_size ", step_size,
                    "; set the positive number of steps between multiplications by gamma"));
    }
    if (!std::isfinite(gamma) || gamma <= 0) {
      reject(concat("step decay with gamma ", gamma, "; gamma must be positive (0.1: tenfold)"));
    }
  }
  if (!needs_total(decay)) return;
  const char* name = decay == LrDecay::kCosine ? "cosine" : "polynomial";
  if (total_steps <= 0) {
    reject(concat(name, " decay with total_steps ", total_steps,
                  "; set the steps of the whole run (warm-up included)"));
  }
  if (warmup_steps > total_steps) {
    reject(concat(name, " decay with warmup_steps ", warmup_steps, " > total_steps ", total_steps,
                  ": the warm-up would outlast the run; shorten it or raise total_steps"));
  }
  if (end_lr < 0 && !is_fraction(end_factor)) {
    reject(concat(name, " decay with end_factor ", end_factor,
                  "; the end LR as a part of the base LR is in [0, 1] (or set end_lr)"));
  }
  if (!std::isfinite(end_lr)) reject(concat("end_lr is ", end_lr));
  if (decay == LrDecay::kPolynomial && !(std::isfinite(power) && power > 0)) {
    reject(concat("polynomial decay with power ", power, "; power must be positive"));
  }
}

double scheduled_lr(const LrScheduleOptions& options, double base_lr, int64_t step) {
  options.validate();
  COHORT_CHECK(step >= 0, "scheduled_lr: step ", step, " is negative; steps count from 0");
  const int64_t n = options.warmup_steps;
  if (step < n) {
    // Written as base * (...) / n so that f = 0 gives base * (s + 1) / n exactly.
    const double f = options.warmup_start_factor;
    return base_lr * (f * double(n) + (1.0 - f) * double(step + 1)) / double(n);
  }
  return decayed(options, base_lr, step - n);
}

bool LrSchedulerState::valid() const {
  if (step < 0) return false;
  for (double lr : base_lrs) {
    if (!std::isfinite(lr) || lr < 0) return false;
  }
  return true;
}

WarmupDecayLR::WarmupDecayLR(torch::optim::Optimizer& optimizer, LrScheduleOptions options)
    : torch::optim::LRScheduler(optimizer), optimizer_(optimizer), options_(std::move(options)) {
  options_.validate();
  step_count_ = 0;  // libtorch 1.13 leaves it uninitialized
  COHORT_CHECK(!optimizer_.param_groups().empty(),
               "WarmupDecayLR: the optimizer has no param groups to schedule");
  for (const auto& group : optimizer_.param_groups()) {
    base_lrs_.push_back(group.options().get_lr());
  }
  apply(0);
}

double WarmupDecayLR::lr_at(int64_t step, size_t group) const {
  COHORT_CHECK(group < base_lrs_.size(), "WarmupDecayLR::lr_at: group ", group,
               " of an optimizer with ", base_lrs_.size(), " param groups");
  return scheduled_lr(options_, base_lrs_[group], step);
}

std::vector<double> WarmupDecayLR::get_lrs() {
  // LRScheduler::step() counts the step after this: these are the next step's LRs.
  std::vector<double> lrs;
  for (size_t g = 0; g < base_lrs_.size(); ++g) lrs.push_back(lr_at(step_count() + 1, g));
  return lrs;
}

LrSchedulerState WarmupDecayLR::state() const {
  return {step_count(), base_lrs_};
}

void WarmupDecayLR::load_state(const LrSchedulerState& state) {
  COHORT_CHECK(state.valid(), "WarmupDecayLR::load_state: step ", state.step,
               " must be >= 0 and every base LR finite and >= 0");
  COHORT_CHECK(state.base_lrs.size() == base_lrs_.size(),
               "WarmupDecayLR::load_state: the state has ", state.base_lrs.size(),
               " base LRs but the optimizer has ", base_lrs_.size(),
               " param groups; load it into the optimizer of the run that saved it");
  base_lrs_ = state.base_lrs;
  step_count_ = static_cast<decltype(step_count_)>(state.step);
  apply(state.step);
}

void WarmupDecayLR::apply(int64_t step) {
  auto& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(lr_at(step, g));
}

}  // namespace cohort::optim
