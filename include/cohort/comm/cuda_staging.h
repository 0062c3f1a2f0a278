// CUDA buffers over cohort's own transports (docs/backends.md, "CUDA buffers without NCCL"): a
// Group whose collectives take device buffers (Buffer::device >= 0) and run cohort's algorithms
// over the bootstrap group's transport (shared memory, TCP, in-process), staging the data
// through pinned host memory in chunks, the device copies overlapped with the host's work
// (Note [Staged device buffers]). For several ranks on one GPU, and for nodes without NCCL.
//
//   auto world = cohort::init();                                   // TCP and shared memory
//   auto staged = cohort::create_cuda_staged_group(world);         // device: local_rank()
//   cohort::CollectiveOptions opts;
//   opts.stream = my_stream;                                       // cudaStream_t, or null
//   staged->allreduce(cohort::Buffer{dev_ptr, n, cohort::DType::kFloat32, /*device=*/0}, opts);
//
// Unlike NCCL's, a staged call is done when its Work is: the result is on the device, and the
// copies were ordered after the work queued on opts.stream before the call. Host buffers take
// the bootstrap group's path unchanged.
//
// Linking: in a build with the CUDA toolkit (CMake option COHORT_WITH_CUDA), the group is made
// by the library cohort::cuda (find_package(cohort COMPONENTS cuda)), so that programs on
// cohort::comm alone need no CUDA; without it cohort::comm's stand-in throws ConfigError.
#pragma once

#include <cstddef>
#include <memory>

#include "cohort/comm/group.h"

namespace cohort {

struct CudaStagingOptions {
  // CUDA device of this rank's buffers. -1: the bootstrap group's local_rank() modulo the number
  // of devices (several ranks share a GPU when there are more local ranks than GPUs).
  int device = -1;
  // Bytes per staged chunk of an allreduce, broadcast or reduce: each chunk's host collective
  // runs while the next chunk is copied off the device and the previous one back. 0: 4 MiB, or
  // COHORT_STAGING_CHUNK_BYTES.
  size_t chunk_bytes = 0;
  // Default deadline of the group's calls; 0: the bootstrap group's.
  Milliseconds timeout{0};
};

// Whether this build of cohort has staged CUDA groups (CMake option COHORT_WITH_CUDA). In
// cohort::comm: a program may ask without linking cohort::cuda.
bool cuda_staging_built();

// Collective over `bootstrap`: every rank calls it. Rank r of the result is rank r of the
// bootstrap. Throws ConfigError when a rank has no usable CUDA device (every rank throws then),
// InvalidArgument for a null bootstrap, TimeoutError when a rank does not join by the timeout.
std::shared_ptr<Group> create_cuda_staged_group(std::shared_ptr<Group> bootstrap,
                                                CudaStagingOptions options = {});

}  // namespace cohort
