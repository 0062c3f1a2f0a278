// Copies of the training state that an asynchronous save writes instead of the state itself
// (AsyncCheckpointOptions::staging_bytes), so that training waits for a memory copy, not for
// the serializer or the disk.
//
// Note [Snapshot saves]
// Torch's serializer is slow for a checkpoint's purpose (it checksums every record into its
// zip: about 250 MB/s here), and an asynchronous save without staging runs it on the writer
// thread while it still reads the live parameters, so before_update() waits for it whenever
// training leaves no core idle. A staged save instead builds its archive, on the caller's
// thread, over copies: the parameters are copied as write_module writes them, and the
// optimizer's state objects are swapped for ones holding copies (its codec knows their
// tensors: optimizer_codec.h) for as long as the optimizer writes itself into the archive, then
// swapped back. The copies are plain memory copies into tensors the checkpointer keeps from
// one save to the next (no page faults after the first), on the tensors' own device. The
// writer thread then serializes and writes the copies at its leisure; before_update() never
// waits for it. A state the snapshot cannot take (an optimizer no codec knows, checkpoint
// parts, whose save() may write live tensors) or one larger than the budget is saved as
// before, unstaged.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cohort/torch/checkpoint/checkpoint.h"

namespace cohort::detail {

class TensorSnapshot {
 public:
  // A copy of `live`, in the tensor kept under `key` when its shape, dtype and device match (a
  // new one otherwise).
  torch::Tensor copy(const std::string& key, const torch::Tensor& live);
  // Bytes of the tensors kept.
  uint64_t held_bytes() const;

 private:
  std::unordered_map<std::string, torch::Tensor> kept_;
};

// The bytes a snapshot of `state` copies (its module's parameters and its optimizer's state
// tensors), or nullopt when it cannot take one: an optimizer no codec knows, or parts.
std::optional<uint64_t> snapshot_bytes(const TrainingState& state);

// While it lives, `optimizer` holds state objects whose tensors are copies (into `snapshot`);
// the originals come back when it is destroyed. Only for an optimizer with a codec.
class OptimizerStateCopies {
 public:
  OptimizerStateCopies(torch::optim::Optimizer& optimizer, TensorSnapshot& snapshot);
  ~OptimizerStateCopies();
  OptimizerStateCopies(const OptimizerStateCopies&) = delete;
  OptimizerStateCopies& operator=(const OptimizerStateCopies&) = delete;

 private:
  torch::optim::Optimizer& optimizer_;
  std::vector<std::pair<torch::Tensor, std::unique_ptr<torch::optim::OptimizerParamState>>>
      originals_;
};

}  // namespace cohort::detail
