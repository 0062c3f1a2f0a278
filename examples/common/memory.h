// What a rank holds for training: the bytes of its model state, and the peak resident memory of
// its process (the examples' epoch summaries).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace cohort_examples {

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
