#include "cohort/core/check.h"
#include "cohort/torch/local_sgd/local_sgd.h"
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
  local_sgd::check_call(*group_, parameters, optimizer, options_.average_optimizer_state, checked_,
                        kHierarchicalAverager);
  const int64_t step = step_++;
  AveragingScope scope = AveragingScope::kNone;
  if (local_sgd::due(step, options_.warmup_steps, options_.period)) {
    scope = AveragingScope::kGlobal;  // subsumes the node average (see the header)
  } else if (local_sgd::due(step, options_.warmup_steps, options_.local_period)) {
    scope = AveragingScope::kNode;
  }
  if (scope == AveragingScope::kNone) return scope;
  Group& group = scope == AveragingScope::kGlobal ? *group_ : *node_group_;
  local_sgd::average_round(group, parameters, optimizer, options_.average_optimizer_state,
                           unaveraged_state_, kHierarchicalAverager);
  return scope;
}

AveragingScope HierarchicalModelAverager::average(torch::nn::Module& module,
                                                  torch::optim::Optimizer* optimizer) {
  return average(local_sgd::trainable_parameters(module), optimizer);
}

}  // namespace cohort
