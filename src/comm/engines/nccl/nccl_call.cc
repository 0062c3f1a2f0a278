#include "engines/nccl/nccl_call.h"

#include <string>

#include "cohort/core/error.h"

namespace cohort::nccl {

void check(ncclResult_t rc, const char* call, ncclComm_t comm) {
  if (rc == ncclSuccess || rc == ncclInProgress) return;
  std::string text = std::string(call) + " failed: " + ncclGetErrorString(rc);
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  }
  if (rc == ncclInvalidArgument || rc == ncclInvalidUsage) throw InvalidArgument(text);
  if (rc == ncclRemoteError) {
    // NCCL does not say which rank failed.
    throw Error(text + "; a peer of this NCCL communicator failed or left");
  }
  throw Error(text);
}

ncclDataType_t datatype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kInt8: return ncclInt8;
    case DType::kUInt8: return ncclUint8;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  throw InvalidArgument("NCCL: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t reduction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return ncclProd;
  }
  throw InvalidArgument("NCCL: unknown reduce op " + std::to_string(static_cast<int>(op)));
}

}  // namespace cohort::nccl
