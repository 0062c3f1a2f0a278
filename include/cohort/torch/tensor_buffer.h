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

// A Buffer over a contiguous tensor's elements, on the CPU (host memory) or on a CUDA device
// (Buffer::device: only NCCL groups take those, cohort/comm/nccl.h). Throws InvalidArgument
// for a tensor that is undefined, not contiguous, on another kind of device, or of a type
// cohort does not reduce.
Buffer tensor_buffer(const torch::Tensor& tensor);

// For CollectiveOptions::stream: the current CUDA stream of a CUDA tensor's device (a
// cudaStream_t), so that the collective is ordered after the work torch queued there. Null for
// CPU tensors, and in builds against a libtorch without CUDA (the legacy default stream,
// torch's default unless the program set another).
void* current_stream(const torch::Tensor& tensor);

}  // namespace cohort
