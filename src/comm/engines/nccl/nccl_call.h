// Small pieces every part of the NCCL backend uses: NCCL's return codes as cohort errors that
// name the call, and cohort's dtypes and ops as NCCL's. CUDA's return codes and the device
// guard are shared with the staged groups (engines/cuda/cuda_call.h).
#pragma once

#include <nccl.h>

#include "engines/cuda/cuda_call.h"
#include "cohort/core/dtype.h"

// Nonblocking communicators (NCCL 2.14) bound every wait with a deadline, and
// ncclCommSplit (2.18) splits a group (docs/backends.md, "The NCCL backend").
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "cohort's NCCL backend needs NCCL >= 2.18"
#endif

namespace cohort::nccl {

// Throws when rc is neither ncclSuccess nor ncclInProgress (which a nonblocking communicator
// returns for calls still under way): InvalidArgument for ncclInvalidArgument and
// ncclInvalidUsage, Error otherwise, naming `call`, ncclGetErrorString and, with a
// communicator, ncclGetLastError.
void check(ncclResult_t rc, const char* call, ncclComm_t comm = nullptr);

using cuda::check_cuda;
using cuda::DeviceGuard;

ncclDataType_t datatype(DType dtype);
ncclRedOp_t reduction(ReduceOp op);  // kAvg: ncclAvg

}  // namespace cohort::nccl
