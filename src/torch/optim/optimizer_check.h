// What ZeroDataParallel::step and FullyShardedDataParallel::step check of the optimizer they
// are given: that it updates elementwise and holds only the wrapper's shards (and what
// amp::MasterWeights::step shares of it: finding a tensor the optimizer should not hold).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort {

// The first tensor of the optimizer's param groups that `belongs` does not accept: where it is
// and its shape, for the messages of the checks below and of amp::MasterWeights.
struct ForeignTensor {
  size_t group = 0;
  size_t index = 0;
  torch::Tensor tensor;
  std::string shape() const;
};
std::optional<ForeignTensor> find_foreign_tensor(
    const torch::optim::Optimizer& optimizer,
    const std::function<bool(const torch::Tensor&)>& belongs);

// Throws InvalidArgument for LBFGS (it needs whole tensors), for LARS or LAMB without a norm
// reduction when the shards are spread over `shard_ranks` > 1 ranks (their trust ratios would
// be of each rank's part), and for a tensor of a param group that `is_shard` does not accept,
// naming the group, the index and the shape. `wrapper`: the class name the messages start with
// ("ZeroDataParallel"); `object`: what the user calls its instance in the advice ("zero", for
// "zero.parameters()").
void check_sharded_optimizer(const torch::optim::Optimizer& optimizer, const std::string& wrapper,
                             const std::string& object, int shard_ranks,
                             const std::function<bool(const torch::Tensor&)>& is_shard);

// The optimizer's type and each param group's size (tensors) and options, one line each: what
// every rank's optimizer must share. Options of torch's SGD, Adam, AdamW, RMSprop, Adagrad and
// cohort's Lars and Lamb in full; of any other optimizer, the learning rate.
std::vector<std::string> describe_optimizer(const torch::optim::Optimizer& optimizer);

// Collective, the first time `optimizer` is stepped (`agreed`: the optimizer last agreed on):
// throws ConfigError on every rank, naming the first difference, when the ranks' optimizers
// differ (describe_optimizer). A step's collectives stay in step when they do, so nothing else
// would say so while the replicas drift apart.
void agree_on_optimizer(Group& group, const torch::optim::Optimizer& optimizer,
                        const std::string& wrapper, const void*& agreed);

}  // namespace cohort
