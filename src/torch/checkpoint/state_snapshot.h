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
// writer thread then serializes and writes the copies at its leisure. A state the snapshot
// cannot take (an optimizer no codec knows, checkpoint parts, whose save() may write live
// tensors) or one larger than the budget is saved as before, unstaged.
//
// Note [Deferred staging]
// Copies of tensors in host memory are not made in save() but recorded (PendingCopies) and
// made by the writer thread first, before it serializes anything: the parameters and the
// optimizer's state do not change until the next update, so training goes on with its forward
// and backward while they are copied, and before_update() waits only for what is left of the
// copies. On a machine with a core training leaves idle, that is nothing; where training keeps
// every core busy the writer (at idle priority until before_update() raises it) copies at
// before_update(), which then waits about as long as save() used to. The copies are plain
// memcpy (one thread: torch's copy would run on an intra-op pool the writer's priority does
// not govern). As for the unstaged saves, the writer compares each live tensor's version
// counter with its value at save() once the copies are made: an update that ran before
// before_update() fails the save by name instead of mixing two steps into the file. Tensors
// on a CUDA device are still copied in save(), ordered on the caller's stream like the update.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/read_tensor.h"
#include "cohort/torch/checkpoint/checkpoint.h"

namespace cohort::detail {

// The copies a save's writer makes before it reads them (Note [Deferred staging]).
class PendingCopies {
 public:
  void add(std::string name, torch::Tensor kept, torch::Tensor live);
  bool empty() const { return live_.empty(); }
  // Makes every copy, then throws CheckpointError naming the first live tensor that changed
  // since add() (an update before AsyncCheckpointer::before_update(); `what`: the save's path).
  void fill(const std::string& what) const;

 private:
  std::vector<ReadTensor> live_;     // what is copied, with its version at add()
  std::vector<torch::Tensor> kept_;  // where, in the same order
};

class TensorSnapshot {
 public:
  // A copy of `live`, in the tensor kept under `key` when its shape, dtype and device match (a
  // new one otherwise). A tensor in host memory is copied later: the copy joins the pending
  // ones, which take_pending() hands to the writer (Note [Deferred staging]).
  torch::Tensor copy(const std::string& key, const torch::Tensor& live);
  // The copies copy() left to make since the last call: every save that staged into this
  // snapshot takes them, and its writer makes them before it reads the copies.
  PendingCopies take_pending();
  // Bytes of the tensors kept.
  uint64_t held_bytes() const;

 private:
  std::unordered_map<std::string, torch::Tensor> kept_;
  PendingCopies pending_;
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
