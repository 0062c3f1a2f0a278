// Collectives on torch tensors: the typed Buffer view of a tensor that cohort::Group takes.
//
//   group->allreduce(cohort::tensor_buffer(t), {.op = cohort::ReduceOp::kAvg});
#pragma once

#include <torch/torch.h>

#include "cohort/comm/buffer.h"

namespace cohort {

// The cohort dtype of a torch scalar type; throws InvalidArgument for types cohort does not
// reduce (bool, complex, quantized, ...), naming the type.
DType to_dtype(torch::ScalarType type);

// A Buffer over a contiguous CPU tensor's elements. Throws InvalidArgument for a tensor that
// is undefined, not contiguous, not on the CPU, or of a type cohort does not reduce.
Buffer tensor_buffer(const torch::Tensor& tensor);

}  // namespace cohort
