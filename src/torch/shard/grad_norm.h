// The norm of a gradient that is spread over the ranks of a group (each rank holding its own
// disjoint part), and clipping it, as torch::nn::utils::clip_grad_norm_ does in one process.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "cohort/comm/group.h"

namespace cohort {

// The total norm of the .grad of `tensors` over every rank; undefined .grad count as absent.
// Collective.
double sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group, double norm_type);

// Scales every .grad by max_norm / (norm + 1e-6) when that is below 1 (torch's rule) and
// returns the norm before clipping. Collective.
double clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group,
                              double max_norm, double norm_type);

}  // namespace cohort
