#include "cohort/core/check.h"
#include "cohort/torch/local_sgd/local_sgd.h"
#include "local_sgd/averaging.h"

namespace cohort {
namespace {

constexpr const char* kPeriodicAverager = "PeriodicModelAverager";

}  // namespace

PeriodicModelAverager::PeriodicModelAverager(std::shared_ptr<Group> group, LocalSgdOptions options)
    : group_(std::move(group)), options_(options) {
  COHORT_CHECK(group_ != nullptr, kPeriodicAverager, ": the group is null");
  COHORT_CHECK(options_.period >= 1, kPeriodicAverager,
               ": period must be >= 1 (average every period steps), got ", options_.period,
               "; use 1 to average after every step");
  COHORT_CHECK(options_.warmup_steps >= 0, kPeriodicAverager, ": warmup_steps must be >= 0, got ",
               options_.warmup_steps, "; use 0 to average from the first step");
}

bool PeriodicModelAverager::average(const std::vector<torch::Tensor>& parameters,
                                    torch::optim::Optimizer* optimizer) {
  local_sgd::check_call(*group_, parameters, optimizer, options_.average_optimizer_state, checked_,
                        kPeriodicAverager);
  const bool now = local_sgd::due(step_++, options_.warmup_steps, options_.period);
  if (!now) return false;
  average_now(parameters, optimizer);
  return true;
}

bool PeriodicModelAverager::average(torch::nn::Module& module, torch::optim::Optimizer* optimizer) {
  return average(local_sgd::trainable_parameters(module), optimizer);
}

void PeriodicModelAverager::average_now(const std::vector<torch::Tensor>& parameters,
                                        torch::optim::Optimizer* optimizer) {
  local_sgd::average_round(*group_, parameters, optimizer, options_.average_optimizer_state,
                           unaveraged_state_, kPeriodicAverager);
}

void PeriodicModelAverager::average_now(torch::nn::Module& module,
                                        torch::optim::Optimizer* optimizer) {
  average_now(local_sgd::trainable_parameters(module), optimizer);
}

}  // namespace cohort
