// Copies rank 0's optimizer state to every member of a group: how ElasticTrainer heals a member
// that joined (or one a step behind).
#pragma once

#include <torch/torch.h>

#include "cohort/comm/group.h"

namespace cohort::detail {

// Collective over `group`; every member passes an optimizer of the same kind over parameters
// of the same shapes, in the same order. For the optimizers a sharded checkpoint knows
// (optimizer_codec.h: SGD, Adam, AdamW, Adagrad, RMSprop, LARS, LAMB) the state tensors travel
// as they are, in one coalesced broadcast, with the param groups' options and step counts in a
// small header; any other optimizer is serialized by Optimizer::save (slower: it is copied
// through a byte stream on both sides). Throws InvalidArgument when a member's optimizer is of
// another kind than rank 0's.
void broadcast_optimizer_state(Group& group, torch::optim::Optimizer& optimizer);

// Rank 0's param-group options (learning rate, ...) on every member: how a sharded strategy's
// optimizer, made anew for each generation, keeps the options the job had reached. Collective;
// optimizers a sharded checkpoint knows only (optimizer_codec.h).
void broadcast_optimizer_options(Group& group, torch::optim::Optimizer& optimizer);

}  // namespace cohort::detail
