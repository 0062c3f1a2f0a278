// The norm of a gradient that is spread over the ranks of a group (each rank holding its own
// disjoint part), and clipping it, as torch::nn::utils::clip_grad_norm_ does in one process.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "agreed_values.h"
#include "cohort/comm/group.h"

namespace cohort {

// The total norm of the .grad of `tensors` over every rank; undefined .grad count as absent.
// Collective. With `any_rank_flag`, the same allreduce also tells every rank whether the flag
// was true on any rank (GradScaler's overflow: Note [One allreduce for the norm and the
// overflow] in amp/grad_scaler.cc), and *any_rank_flag becomes that. The `agreed` values ride
// along too (Note [Values that ride along]): ConfigError on every rank where one differs.
double sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group, double norm_type,
                         bool* any_rank_flag = nullptr,
                         const std::vector<AgreedValue>& agreed = {});

// Scales every .grad by max_norm / (norm + 1e-6) when that is below 1 (torch's rule) and
// returns the norm before clipping. Collective; every rank must pass the same max_norm, and
// hold the same `agreed` values (checked). With `any_rank_flag` (as above), nothing is clipped
// when the flag is true on some rank.
double clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group,
                              double max_norm, double norm_type, bool* any_rank_flag = nullptr,
                              std::vector<AgreedValue> agreed = {});

}  // namespace cohort
