// What cohort_comm knows of the NCCL backend, which lives in a library of its own (cohort::nccl,
// src/comm/CMakeLists.txt): whether the build has it, and without it the stand-in of
// create_nccl_group.
#include "cohort/comm/nccl.h"
#include "cohort/core/error.h"

namespace cohort {

bool nccl_backend_built() {
#ifdef COHORT_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

#ifndef COHORT_HAVE_NCCL
std::shared_ptr<Group> create_nccl_group(std::shared_ptr<Group>, NcclOptions) {
  throw ConfigError(
      "this cohort was built without the NCCL backend: install the CUDA toolkit and NCCL and "
      "configure with -DCOHORT_WITH_NCCL=ON (CUDAToolkit_ROOT, NCCL_ROOT if not in "
      "/usr/local/cuda)");
}
#endif

}  // namespace cohort
