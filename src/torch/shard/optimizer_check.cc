#include "shard/optimizer_check.h"

#include <sstream>

#include "cohort/core/check.h"
#include "cohort/core/error.h"
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

}  // namespace cohort
