// The NCCL backend (docs/backends.md, "The NCCL backend"): a Group whose collectives run on CUDA
// device memory through NCCL, made from a bootstrap group of any backend that carries NCCL's unique
// id.
//
//   auto world = cohort::init();                                   // TCP, MPI, ...
//   auto gpus = cohort::create_nccl_group(world, {/*device=*/world->local_rank()});
//   cohort::CollectiveOptions opts;
//   opts.stream = my_stream;                                       // cudaStream_t, or null
//   gpus->allreduce(cohort::Buffer{dev_ptr, n, cohort::DType::kFloat32, /*device=*/0}, opts);
//
// Device buffers are only queued on the device: the call returns before the data is reduced,
// and work queued on opts.stream afterwards sees the result. Host buffers given to an NCCL
// group go through a private copy of the bootstrap group (same ranks, host memory).
//
// Linking: in a build with NCCL, create_nccl_group is in the library cohort::nccl (CMake:
// find_package(cohort COMPONENTS nccl), target_link_libraries(app PRIVATE cohort::nccl)), so
// that programs on cohort::comm alone need no CUDA.
#pragma once

#include <memory>

#include "cohort/comm/group.h"

namespace cohort {

struct NcclOptions {
  // CUDA device of this rank. -1: the bootstrap group's local_rank() (one GPU per rank).
  int device = -1;
  // Default deadline of the group's calls; 0: the bootstrap group's.
  Milliseconds timeout{0};
};

// Whether this build of cohort has the NCCL backend (CMake option COHORT_WITH_NCCL). In
// cohort::comm: a program may ask without linking cohort::nccl.
bool nccl_backend_built();

// Collective over `bootstrap`: every rank calls it. Rank r of the result is rank r of the
// bootstrap. Throws ConfigError when cohort was built without NCCL or a rank has no usable
// CUDA device (every rank throws then, not only that one), InvalidArgument for a null
// bootstrap, TimeoutError when a rank does not join by the timeout.
std::shared_ptr<Group> create_nccl_group(std::shared_ptr<Group> bootstrap,
                                         NcclOptions options = {});

}  // namespace cohort
