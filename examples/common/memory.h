// What a rank holds for training: the bytes of its model state, and the peak resident memory of
// its process (the examples' epoch summaries).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace cohort_examples {

// One rank's model state in bytes. Under DDP every rank holds all of it; the sharded
// strategies divide some of it among the ranks (docs/sharding.md, docs/fsdp.md).
struct ModelStateBytes {
  int64_t parameters = 0;     // whole parameters (DDP, ZeRO) or this rank's shards (FSDP)
  int64_t peak_gathered = 0;  // FSDP: the most bytes of whole units held at once
  int64_t gradients = 0;
  int64_t peak_gradients = 0;  // ZeRO, FSDP: the most gradient bytes held at once (in backward)
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + peak_gathered + gradients + optimizer_state; }
};

// Bytes of the defined tensors among `tensors` (their elements, not their storages' capacity).
int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors);

// Bytes of the .grad of each of `parameters` that has one.
int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters);

// This process's peak resident set size in bytes (getrusage's ru_maxrss).
int64_t peak_rss_bytes();

// Keeps freed blocks of up to 32 MiB (glibc's largest mmap threshold) and the heap's free top in
// the process (glibc mallopt; elsewhere a no-op). A training step frees and allocates the same
// large tensors again; where glibc hands them back to the system, every step faults their pages
// in anew. On a 2-vCPU AMD EPYC VM the planner's probe of char_lm, timed before training, took
// 450 ms a step that way against the 200 ms training took (docs/planner.md, "Measured"). Call it
// first in main().
void keep_freed_memory();

// The training steps' own tensor memory (cohort::track_cpu_tensor_memory, started by the
// trainers): start_counting_step_memory() before an epoch's steps takes the bytes held then
// (data set, model, optimizer) as the base, stop_counting_step_memory() after them keeps the
// most held above it in between (activations, gradients, optimizer state made in the steps,
// temporaries; not the evaluation), which step_memory_peak_bytes() gives (0 when tensor
// memory is not tracked).
void start_counting_step_memory();
void stop_counting_step_memory();
int64_t step_memory_peak_bytes();

// What training's tensors took at their peak beyond those held before the model was made (the
// data sets): the model's state and the steps' memory, what the planner predicts per rank.
// mark_memory_before_model() takes the base (0 when tensor memory is not tracked).
void mark_memory_before_model();
int64_t training_peak_bytes();

}  // namespace cohort_examples
