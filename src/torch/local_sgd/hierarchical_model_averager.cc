#include "cohort/core/check.h"
#include "cohort/torch/local_sgd.h"
#include "local_sgd/averaging.h"

namespace cohort {
namespace {

constexpr const char* kHierarchicalAverager = "HierarchicalModelAverager";

}  // namespace

HierarchicalModelAverager::HierarchicalModelAverager(std::shared_ptr<Group> group,
                                                     HierarchicalLocalSgdOptions options)
    : group_(std::move(group)), options_(options) {
  COHORT_CHECK(group_ != nullptr, kHierarchicalAverager, ": the group is null");
  COHORT_CHECK(options_.period >= 1, kHierarchicalAverager,
               ": period (steps between averages over the whole group) must be >= 1, got ",
               options_.period);
  COHORT_CHECK(options_.local_period >= 1, kHierarchicalAverager,
               ": local_period (steps between averages inside a node) must be >= 1, got ",
               options_.local_period, "; use 1 to average inside nodes after every step");
  COHORT_CHECK(options_.warmup_steps >= 0, kHierarchicalAverager,
               ": warmup_steps must be >= 0, got ", options_.warmup_steps,
               "; use 0 to average from the first step");
  // Collective; made once: a split is a round of the whole group.
  node_group_ = group_->split(group_->node_rank(), group_->rank());
}

AveragingScope HierarchicalModelAverager::average(const std::vector<torch::Tensor>& parameters,
                                                  torch::optim::Optimizer* optimizer) {
  COHORT_CHECK(!options_.average_optimizer_state || optimizer != nullptr, kHierarchicalAverager,
               ": average_optimizer_state is on but no optimizer was passed to average(); pass "
               "the optimizer whose state to average");
  if (!checked_) {
    local_sgd::check_same_parameters(*group_, parameters, kHierarchicalAverager);
    checked_ = true;
  }
  const int64_t step = step_++;
  AveragingScope scope = AveragingScope::kNone;
  if (local_sgd::due(step, options_.warmup_steps, options_.period)) {
    scope = AveragingScope::kGlobal;  // subsumes the node average (see the header)
  } else if (local_sgd::due(step, options_.warmup_steps, options_.local_period)) {
    scope = AveragingScope::kNode;
  }
  if (scope == AveragingScope::kNone) return scope;
  Group& group = scope == AveragingScope::kGlobal ? *group_ : *node_group_;
  local_sgd::average_fused(group, parameters, kHierarchicalAverager);
  if (options_.average_optimizer_state) {
    unaveraged_state_ =
        local_sgd::average_optimizer_state(group, *optimizer, kHierarchicalAverager);
  }
  return scope;
}

AveragingScope HierarchicalModelAverager::average(torch::nn::Module& module,
                                                  torch::optim::Optimizer* optimizer) {
  return average(local_sgd::trainable_parameters(module), optimizer);
}

}  // namespace cohort
