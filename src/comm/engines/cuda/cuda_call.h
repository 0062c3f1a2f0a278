// What every piece of cohort that calls the CUDA runtime shares (the staged groups here, the
// NCCL backend): CUDA's return codes as cohort errors that name the call, a guard that makes a
// device current for the calls in its scope, and the agreement of a group's ranks that each
// has its device.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "cohort/core/deadline.h"

namespace cohort {
class HostCollectives;  // backends/host_collectives.h
}

namespace cohort::cuda {

// Throws Error naming `call` and cudaGetErrorString when rc is not cudaSuccess.
void check_cuda(cudaError_t rc, const char* call);

// Makes `device` current and restores the previous one at the end of the scope (the program's
// thread may be working on another device; a group's worker thread is shared by no one).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// The number of CUDA devices this process sees; 0 where cudaGetDeviceCount fails.
int device_count();

// Empty when this rank can use `device`, else why not.
std::string device_problem(int device);

// Collective over `group`: throws ConfigError on every rank when any rank has a problem (so one
// rank without a GPU fails them all at once instead of leaving them waiting). `who` names the
// call in the error: "create_nccl_group".
void agree_on_devices(HostCollectives& group, const std::string& problem, const char* who,
                      Deadline deadline);

}  // namespace cohort::cuda
