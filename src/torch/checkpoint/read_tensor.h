// What keeps a save that reads the training state after save() returned from mixing two steps:
// each tensor it reads, with its version counter at save() (Note [Asynchronous saves] in
// async_checkpoint.cc, Note [Deferred staging] in state_snapshot.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cohort::detail {

// A tensor the save reads after prepare_*() returned, by name, with its version counter then.
struct ReadTensor {
  std::string name;
  torch::Tensor tensor;
  int64_t version = 0;
};

// Throws CheckpointError naming the first of `reads` changed since its version was taken (an
// update before AsyncCheckpointer::before_update()), which the save of `path` would have mixed
// with the step before.
void check_unchanged(const std::string& path, const std::vector<ReadTensor>& reads);

}  // namespace cohort::detail
