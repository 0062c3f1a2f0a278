// The bytes of CPU tensor memory this process holds, counted at the allocator: what a training
// step's activations, gradients and buffers really take, which the resident set size (pages the
// C library keeps after a free, the program's code) only bounds from above.
//
//   cohort::track_cpu_tensor_memory();          // once, before the tensors to count exist
//   cohort::reset_peak_cpu_tensor_bytes();
//   loss = model->forward(x); loss.backward();
//   int64_t peak = cohort::peak_cpu_tensor_bytes();   // the most held at once since the reset
//
// Tracking puts a counting allocator in front of libtorch's CPU allocator (c10::SetCPUAllocator)
// for the rest of the process: every tensor allocated from then on is counted, on any thread, at
// the cost of one small bookkeeping allocation per tensor. Tensors that existed before are not.
// CUDA memory has its own statistics (c10::cuda::CUDACachingAllocator).
#pragma once

#include <cstdint>
#include <memory>

namespace cohort {

// Starts counting (once; later calls do nothing). Call it early, before other threads allocate
// tensors: libtorch's allocator switch is not synchronized with allocations in flight.
void track_cpu_tensor_memory();

// Whether counting is on (false also when an allocator of a higher priority than cohort's was
// installed by another library: then nothing is counted).
bool tracking_cpu_tensor_memory();

// Bytes of the CPU tensors allocated since tracking started that are still alive (0 before).
int64_t cpu_tensor_bytes();

// The most cpu_tensor_bytes() has been since tracking started or the last reset.
int64_t peak_cpu_tensor_bytes();

// Sets the peak to the bytes held now.
void reset_peak_cpu_tensor_bytes();

// Counts `bytes` of CPU tensor memory that libtorch's allocator never saw (a tensor made with
// torch::from_blob over memory from elsewhere: DDP's buckets in a node's registered shared
// memory) as held until the returned handle is destroyed, so that cpu_tensor_bytes() and the
// peak include it. Keep the handle in the tensor's deleter. Counts nothing (and returns a handle
// all the same) when tracking is off.
std::shared_ptr<void> count_foreign_cpu_tensor_bytes(int64_t bytes);

}  // namespace cohort
