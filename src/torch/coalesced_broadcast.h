// Copies a set of tensors from one rank to all, one broadcast per dtype for the small ones
// instead of one per tensor (a model's buffers are many small tensors; each broadcast costs a
// round trip), and the large contiguous ones in place (packing them would copy every byte
// twice more, which costs more than their round trips: a joiner's healing in ElasticTrainer).
#pragma once

#include <torch/torch.h>

#include <vector>

#include "cohort/comm/group.h"

namespace cohort {

// Collective: every rank passes tensors of the same shapes and dtypes, in the same order.
// Works on parameters too (writes without recording autograd history).
void broadcast_coalesced(Group& group, const std::vector<torch::Tensor>& tensors, int root,
                         CallSite site);

}  // namespace cohort
