// What cohort_comm knows of the staged CUDA groups, which live in a library of their own
// (cohort::cuda, src/comm/CMakeLists.txt): whether the build has them, and without them the
// stand-in of create_cuda_staged_group.
#include "cohort/comm/cuda_staging.h"
#include "cohort/core/error.h"

namespace cohort {

bool cuda_staging_built() {
#ifdef COHORT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef COHORT_HAVE_CUDA
std::shared_ptr<Group> create_cuda_staged_group(std::shared_ptr<Group>, CudaStagingOptions) {
  throw ConfigError(
      "this cohort was built without CUDA: install the CUDA toolkit and configure with "
      "-DCOHORT_WITH_CUDA=ON (CUDAToolkit_ROOT if not in /usr/local/cuda)");
}
#endif

}  // namespace cohort
