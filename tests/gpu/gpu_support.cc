#include "gpu/gpu_support.h"

#include <stdexcept>

#include "cohort/comm/nccl.h"
#include "support/test_support.h"

namespace cohort::testing {

int visible_gpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

void cuda_ok(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(rc));
  }
}

void with_nccl_groups(int world, const std::function<void(int, Group&)>& fn) {
  auto bootstraps = make_inproc_groups(world, quick_options());
  run_ranks(world, [&](int rank) {
    cuda_ok(cudaSetDevice(rank), "cudaSetDevice");
    NcclOptions options;
    options.device = rank;
    auto group = create_nccl_group(bootstraps[static_cast<size_t>(rank)], options);
    fn(rank, *group);
  });
}

}  // namespace cohort::testing
