#include "engines/cuda/cuda_call.h"

#include <chrono>
#include <cstdint>
#include <vector>

#include "backends/host_collectives.h"
#include "cohort/core/error.h"

namespace cohort::cuda {

void check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  throw Error(std::string(call) + " failed: " + cudaGetErrorName(rc) + ": " +
              cudaGetErrorString(rc));
}

DeviceGuard::DeviceGuard(int device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

int device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

std::string device_problem(int device) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc != cudaSuccess) {
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(rc) +
           ": " + cudaGetErrorString(rc) + ")";
  }
  if (device < 0 || device >= count) {
    return "CUDA device " + std::to_string(device) + " does not exist (this process sees " +
           std::to_string(count) + "; CUDA_VISIBLE_DEVICES narrows that)";
  }
  return "";
}

void agree_on_devices(HostCollectives& group, const std::string& problem, const char* who,
                      Deadline deadline) {
  int32_t ok = problem.empty() ? 1 : 0;
  std::vector<int32_t> all(static_cast<size_t>(group.size()));
  group.allgather(&ok, all.data(), sizeof ok, deadline);
  std::string failed;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (failed.empty()) return;
  if (!problem.empty()) {
    throw ConfigError(std::string(who) + ": rank " + std::to_string(group.rank()) + ": " + problem);
  }
  throw ConfigError(std::string(who) + ": ranks " + failed +
                    " have no usable CUDA device (their errors say why)");
}

}  // namespace cohort::cuda
