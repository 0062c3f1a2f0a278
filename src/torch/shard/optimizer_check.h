// What ZeroDataParallel::step and FullyShardedDataParallel::step check of the optimizer they
// are given: that it updates elementwise and holds only the wrapper's shards.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>

namespace cohort {

// Throws InvalidArgument for LBFGS (it needs whole tensors) and for a tensor of a param group
// that `is_shard` does not accept, naming the group, the index and the shape. `wrapper`: the
// class name the messages start with ("ZeroDataParallel"); `object`: what the user calls its
// instance in the advice ("zero", for "zero.parameters()").
void check_sharded_optimizer(const torch::optim::Optimizer& optimizer, const std::string& wrapper,
                             const std::string& object,
                             const std::function<bool(const torch::Tensor&)>& is_shard);

}  // namespace cohort
