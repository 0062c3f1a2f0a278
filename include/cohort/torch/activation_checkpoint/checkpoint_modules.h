// cohort::checkpoint_modules: checkpoints chosen submodules of a model without changing the
// model's class or its forward(), in the spirit of FSDP's units.
//
//   auto model = std::make_shared<Gpt>(config);        // blocks in a torch::nn::Sequential
//   cohort::CheckpointPolicy policy;
//   policy.sequential_children = true;                 // every block (or paths, a predicate)
//   cohort::checkpoint_modules(*model, policy);        // before or after DDP / FSDP
//
// libtorch calls a module's forward() without any hook (it is not virtual): a parent's
// forward() that calls `blocks[i]->as<Block>()->forward(x)` or a member `fc1_->forward(x)`
// cannot be redirected from outside. A torch::nn::Sequential is the exception: it calls its
// children through type-erased handles, one per child, and checkpoint_modules puts a handle
// that checkpoints the child in place of the child's own. So the chosen modules must be
// children of a Sequential (at any depth); for any other module checkpoint_modules says so, and
// cohort::checkpoint(module, x) (checkpoint.h) called from forward() does the same work.
//
// Nothing else changes: the model's registered children, parameter names, state_dict, device
// moves, train()/eval(), DDP's buckets and FSDP's units are those of the original model
// (the handle is not a registered module). A wrapped module in eval() mode, or under
// NoGradGuard, runs as it is. Its buffers (BatchNorm's running statistics) are restored after
// the recomputation. Convert BatchNorms to SyncBatchNorm (convert_sync_batchnorm) before, not
// after: the conversion replaces the handles of a Sequential. docs/activation_checkpointing.md.
#pragma once

#include <torch/nn/module.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cohort/torch/activation_checkpoint/checkpoint.h"

namespace cohort {

// Consecutive children [begin, end) of the Sequential at `sequential` (a path; "" for the
// model itself) checkpointed as one region: only the input of `begin` and the output of
// `end - 1` are kept (PyTorch's checkpoint_sequential, by segment).
struct SequentialSpan {
  std::string sequential;
  size_t begin = 0;
  size_t end = 0;
};

struct CheckpointPolicy {
  // Submodules by path from the model ("blocks.3"), each a child of a Sequential.
  std::vector<std::string> paths;
  // Every child of every Sequential of the model (a transformer's blocks in a Sequential).
  bool sequential_children = false;
  // Any child of a Sequential for which this returns true (path from the model, the module).
  std::function<bool(const std::string& path, const torch::nn::Module& module)> predicate;
  // Selective checkpointing: of the modules chosen by the three rules above, in the order of
  // the model's named_modules() (a Sequential's forward order), one in every `every` is
  // checkpointed, starting with the first (1: all; 2: every other). Must be at least 1.
  size_t every = 1;
  // Spans of a Sequential checkpointed as one region each (not subject to `every`).
  std::vector<SequentialSpan> spans;
  // For every region; the name is set to each region's path.
  CheckpointOptions options;
};

// Checkpoints what `policy` chooses in `model` and returns the regions' paths in forward order
// ("blocks.0", ..., "layers[0:7]" for a span). Throws InvalidArgument, changing nothing, for a
// path that names no submodule, a module that is not a child of a Sequential (naming its
// holder and what to do instead), a module already checkpointed, a span out of range or
// overlapping another, every == 0, or a policy that chooses nothing.
std::vector<std::string> checkpoint_modules(torch::nn::Module& model,
                                            const CheckpointPolicy& policy);

}  // namespace cohort
