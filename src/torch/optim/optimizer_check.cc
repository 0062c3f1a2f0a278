#include "optim/optimizer_check.h"

#include <c10/util/Type.h>

#include <sstream>
#include <tuple>
#include <typeinfo>

#include "cohort/comm/agreement.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/optim/lamb.h"
#include "cohort/torch/optim/lars.h"
#include "cohort/torch/optim/trust_ratio.h"

namespace cohort {

std::string ForeignTensor::shape() const {
  std::ostringstream out;
  out << tensor.sizes();
  return out.str();
}

std::optional<ForeignTensor> find_foreign_tensor(
    const torch::optim::Optimizer& optimizer,
    const std::function<bool(const torch::Tensor&)>& belongs) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!belongs(params[i])) return ForeignTensor{g, i, params[i]};
    }
  }
  return std::nullopt;
}

void check_sharded_optimizer(const torch::optim::Optimizer& optimizer, const std::string& wrapper,
                             const std::string& object, int shard_ranks,
                             const std::function<bool(const torch::Tensor&)>& is_shard) {
  COHORT_CHECK(dynamic_cast<const torch::optim::LBFGS*>(&optimizer) == nullptr, wrapper,
               "::step: LBFGS needs whole tensors (its line search and history span the full "
               "parameter vector) and ",
               wrapper,
               " gives each rank only a shard of it. Use an elementwise optimizer (SGD, Adam, "
               "AdamW, Adagrad, RMSprop) or plain DistributedDataParallel.");
  const auto* adaptive = dynamic_cast<const optim::TrustRatioOptimizer*>(&optimizer);
  COHORT_CHECK(adaptive == nullptr || shard_ranks <= 1 || adaptive->norm_reduction(), wrapper,
               "::step: LARS and LAMB need the norms of whole parameters and this rank holds "
               "only a shard of each; pass cohort::optim::shard_norm_reduction(",
               object, ") to the optimizer's constructor or set_norm_reduction().");
  const auto foreign = find_foreign_tensor(optimizer, is_shard);
  if (!foreign) return;
  throw InvalidArgument(detail::concat(
      wrapper, "::step: the optimizer's param group ", foreign->group, " holds, at ",
      foreign->index, ", a tensor of shape ", foreign->shape(),
      " that is not one of this rank's shards. Build the optimizer over ", object,
      ".parameters() (or ", object, ".named_parameters()), not over the model's parameters."));
}

namespace {

std::string betas_of(const std::tuple<double, double>& betas) {
  return detail::concat("(", std::get<0>(betas), ", ", std::get<1>(betas), ")");
}

// One param group's options as "name=value" pairs, for the optimizers cohort knows.
std::string describe_options(const torch::optim::OptimizerOptions& options) {
  namespace o = torch::optim;
  if (const auto* sgd = dynamic_cast<const o::SGDOptions*>(&options)) {
    return detail::concat("lr=", sgd->lr(), " momentum=", sgd->momentum(),
                          " dampening=", sgd->dampening(), " weight_decay=", sgd->weight_decay(),
                          " nesterov=", sgd->nesterov());
  }
  if (const auto* adam = dynamic_cast<const o::AdamOptions*>(&options)) {
    return detail::concat("lr=", adam->lr(), " betas=", betas_of(adam->betas()),
                          " eps=", adam->eps(), " weight_decay=", adam->weight_decay(),
                          " amsgrad=", adam->amsgrad());
  }
  if (const auto* adamw = dynamic_cast<const o::AdamWOptions*>(&options)) {
    return detail::concat("lr=", adamw->lr(), " betas=", betas_of(adamw->betas()),
                          " eps=", adamw->eps(), " weight_decay=", adamw->weight_decay(),
                          " amsgrad=", adamw->amsgrad());
  }
  if (const auto* rms = dynamic_cast<const o::RMSpropOptions*>(&options)) {
    return detail::concat("lr=", rms->lr(), " alpha=", rms->alpha(), " eps=", rms->eps(),
                          " weight_decay=", rms->weight_decay(), " momentum=", rms->momentum(),
                          " centered=", rms->centered());
  }
  if (const auto* adagrad = dynamic_cast<const o::AdagradOptions*>(&options)) {
    return detail::concat("lr=", adagrad->lr(), " lr_decay=", adagrad->lr_decay(),
                          " weight_decay=", adagrad->weight_decay(), " eps=", adagrad->eps());
  }
  if (const auto* lars = dynamic_cast<const optim::LarsOptions*>(&options)) {
    return detail::concat("lr=", lars->lr(), " momentum=", lars->momentum(),
                          " nesterov=", lars->nesterov(), " weight_decay=", lars->weight_decay(),
                          " trust_coefficient=", lars->trust_coefficient(), " eps=", lars->eps(),
                          " adapt=", lars->adapt());
  }
  if (const auto* lamb = dynamic_cast<const optim::LambOptions*>(&options)) {
    return detail::concat("lr=", lamb->lr(), " betas=", betas_of(lamb->betas()),
                          " eps=", lamb->eps(), " weight_decay=", lamb->weight_decay(),
                          " trust_clip=", lamb->trust_clip(), " adapt=", lamb->adapt());
  }
  return detail::concat("lr=", options.get_lr());
}

}  // namespace

std::vector<std::string> describe_optimizer(const torch::optim::Optimizer& optimizer) {
  std::vector<std::string> lines{"optimizer " + c10::demangle(typeid(optimizer).name())};
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    lines.push_back(detail::concat("param group ", g, ": ", groups[g].params().size(), " tensors, ",
                                   describe_options(groups[g].options())));
  }
  return lines;
}

void agree_on_optimizer(Group& group, const torch::optim::Optimizer& optimizer,
                        const std::string& wrapper, const void*& agreed) {
  if (agreed == &optimizer) return;
  const std::string difference = first_disagreement(group, describe_optimizer(optimizer), "line");
  if (!difference.empty()) {
    throw ConfigError(detail::concat(
        wrapper, "::step: the ranks step different optimizers (type, param groups or options): ",
        difference, ". Give every rank the same optimizer, param groups and options"));
  }
  agreed = &optimizer;
}

}  // namespace cohort
