// Small pieces every part of the NCCL backend uses: NCCL's and CUDA's return codes as cohort
// errors that name the call, cohort's dtypes and ops as NCCL's, and a guard that makes the
// group's device current for the calls in its scope.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

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
// Throws Error naming `call` and cudaGetErrorString when rc is not cudaSuccess.
void check_cuda(cudaError_t rc, const char* call);

ncclDataType_t datatype(DType dtype);
ncclRedOp_t reduction(ReduceOp op);  // kAvg: ncclAvg

// Makes `device` current and restores the previous one at the end of the scope (the program's
// thread may be working on another device; the group's worker thread is shared by no one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace cohort::nccl
