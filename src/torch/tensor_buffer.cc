#include "cohort/torch/tensor_buffer.h"

#include "cohort/core/check.h"

#ifdef COHORT_TORCH_HAS_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace cohort {

DType to_dtype(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return DType::kFloat32;
    case torch::kFloat64: return DType::kFloat64;
    case torch::kFloat16: return DType::kFloat16;
    case torch::kBFloat16: return DType::kBFloat16;
    case torch::kInt8: return DType::kInt8;
    case torch::kUInt8: return DType::kUInt8;
    case torch::kInt32: return DType::kInt32;
    case torch::kInt64: return DType::kInt64;
    default: break;
  }
  throw InvalidArgument(detail::concat(
      "cohort cannot reduce tensors of type ", c10::toString(type),
      ": use float32/64, float16, bfloat16, int8, uint8, int32 or int64 (convert with .to())"));
}

Buffer tensor_buffer(const torch::Tensor& tensor) {
  COHORT_CHECK(tensor.defined(), "tensor_buffer: the tensor is undefined");
  COHORT_CHECK(tensor.device().is_cpu() || tensor.device().is_cuda(),
               "tensor_buffer: the tensor is on ", tensor.device(),
               "; the comm layer moves CPU memory, and CUDA memory on NCCL groups (copy it "
               "with .cpu())");
  COHORT_CHECK(tensor.is_contiguous(),
               "tensor_buffer: the tensor is not contiguous (call .contiguous() first)");
  return Buffer{
      tensor.data_ptr(), static_cast<size_t>(tensor.numel()), to_dtype(tensor.scalar_type()),
      tensor.device().is_cuda() ? static_cast<int>(tensor.device().index()) : kHostMemory};
}

void* current_stream(const torch::Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_cuda()) return nullptr;
#ifdef COHORT_TORCH_HAS_CUDA
  return c10::cuda::getCurrentCUDAStream(tensor.device().index()).stream();
#else
  // This libtorch has no c10_cuda (it cannot make CUDA tensors either): the legacy default
  // stream, which is also torch's current stream unless a program changes it.
  return nullptr;
#endif
}

}  // namespace cohort
