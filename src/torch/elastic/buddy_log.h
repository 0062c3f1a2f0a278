// The steps a buddy copy has received and not applied (Note [Buddy copies] in buddy_copy.h):
// each committed step's packed gradients of the predecessor's ranges, with the optimizer's
// param-group options the step was taken with.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "elastic/held_pieces.h"

namespace cohort::detail {

class BuddyLog {
 public:
  // Where the gradients of the step being voted on are received: `elements` float32
  // (BuddyGradients::elements); the buffer of a replayed or dropped step when one is kept.
  const torch::Tensor& incoming(int64_t elements);
  // The step of incoming() committed: it joins the log with `stepped_with`'s group options.
  void commit_incoming(const torch::optim::Optimizer& stepped_with);
  // The step of incoming() did not commit: its gradients are dropped.
  void drop_incoming();

  // Applies the logged steps to `copy`, in order, and empties the log: each step's gradients
  // and options, then its optimizer's step.
  void replay(HeldPieces& copy);
  // Empties the log without applying it (the copy was refreshed with a newer state), keeping
  // the buffers for the next steps.
  void clear();
  // Empties the log and lets its buffers go (the copy's ranges change).
  void reset();

  size_t steps() const { return entries_.size(); }

 private:
  struct Entry {
    torch::Tensor gradients;
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;  // by param group
  };
  std::vector<Entry> entries_;
  torch::Tensor incoming_;
  // Buffers of steps replayed or refreshed away, reused so that a step's receive writes memory
  // already mapped (a fresh 1/W of the gradients costs its page faults every step).
  std::vector<torch::Tensor> spare_;
};

}  // namespace cohort::detail
