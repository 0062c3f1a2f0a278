// What a rank holds for training: the bytes of its model state, counted from the tensors
// themselves, and the peak resident memory of its process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace char_lm {

// One rank's model state in bytes. Under DDP every rank holds all of it; the sharded
// strategies divide some of it among the ranks (docs/char_lm.md).
struct ModelStateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

// Bytes of the defined tensors among `tensors` (their elements, not their storages' capacity).
int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors);

// Bytes of the .grad of each of `parameters` that has one.
int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters);

// Bytes of an AdamW optimizer's per-parameter state (exp_avg, exp_avg_sq and, with amsgrad,
// max_exp_avg_sq). Throws std::invalid_argument for a state of another optimizer: the example
// builds AdamW, and counting another's state needs its own accessors.
int64_t adamw_state_bytes(const torch::optim::Optimizer& optimizer);

// This process's peak resident set size in bytes (getrusage's ru_maxrss).
int64_t peak_rss_bytes();

}  // namespace char_lm
