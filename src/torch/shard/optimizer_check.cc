#include "shard/optimizer_check.h"

#include <sstream>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {

void check_sharded_optimizer(const torch::optim::Optimizer& optimizer, const std::string& wrapper,
                             const std::string& object,
                             const std::function<bool(const torch::Tensor&)>& is_shard) {
  COHORT_CHECK(dynamic_cast<const torch::optim::LBFGS*>(&optimizer) == nullptr, wrapper,
               "::step: LBFGS needs whole tensors (its line search and history span the full "
               "parameter vector) and ",
               wrapper,
               " gives each rank only a shard of it. Use an elementwise optimizer (SGD, Adam, "
               "AdamW, Adagrad, RMSprop) or plain DistributedDataParallel.");
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (is_shard(params[i])) continue;
      std::ostringstream shape;
      shape << params[i].sizes();
      throw InvalidArgument(detail::concat(
          wrapper, "::step: the optimizer's param group ", g, " holds, at ", i,
          ", a tensor of shape ", shape.str(),
          " that is not one of this rank's shards. Build the optimizer over ", object,
          ".parameters() (or ", object, ".named_parameters()), not over the model's parameters."));
    }
  }
}

}  // namespace cohort
