// The stand-ins of cohort/comm/nccl.h in a build without NCCL.
#include "cohort/comm/nccl.h"
#include "cohort/core/error.h"

namespace cohort {

#ifndef COHORT_HAVE_NCCL
bool nccl_backend_built() {
  return false;
}

std::shared_ptr<Group> create_nccl_group(std::shared_ptr<Group>, NcclOptions) {
  throw ConfigError(
      "this cohort was built without the NCCL backend: install the CUDA toolkit and NCCL and "
      "configure with -DCOHORT_WITH_NCCL=ON (CUDAToolkit_ROOT, NCCL_LIBRARY if not in "
      "/usr/local/cuda)");
}
#endif

}  // namespace cohort
