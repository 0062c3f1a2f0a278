// The autograd node that stands for a whole checkpointed region (Note [Recompute node] in
// recompute_node.cc).
#pragma once

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <string>
#include <vector>

#include "activation_checkpoint/forward_state.h"
#include "cohort/torch/activation_checkpoint/checkpoint.h"

namespace cohort::activation_checkpoint {

// One output of the forward, which the recomputation must give again.
struct OutputRecord {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
  bool requires_grad;  // then it has a slot of the node
};

// What the forward learned about the region, for the node that recomputes it.
struct RegionRecord {
  CheckpointRegion region;
  CheckpointOptions options;
  std::vector<at::Tensor> inputs;       // detached aliases of the region's inputs
  std::vector<bool> input_requires_grad;
  std::vector<int64_t> input_versions;  // after the forward
  std::vector<OutputRecord> outputs;
  RngSnapshot rng;
  AutocastSnapshot autocast;
};

// How errors name a region: "the checkpointed region 'blocks.3'", or "a checkpointed region"
// when it has no name.
std::string region_label(const CheckpointOptions& options);

// Makes every output that needs a gradient the output of a node the region recorded (sequence
// numbers from `first` to now): an input or a captured tensor returned as it is becomes a view
// of itself, so that the region's node, not the tensor's own history, stands for it.
void own_outputs(std::vector<at::Tensor>& outputs, uint64_t first);

class RecomputeNode final : public torch::autograd::Node {
 public:
  // edges: one per input that requires grad (in input order), then those of the tensors
  // outside the region that it reads and that need a gradient.
  RecomputeNode(RegionRecord record, torch::autograd::edge_list edges);

  std::string name() const override { return "cohort::CheckpointBackward"; }

  torch::autograd::variable_list apply(torch::autograd::variable_list&& gradients) override;

  void release_variables() override;

 private:
  void check_inputs_unchanged() const;
  // The region's outputs, computed again with autograd recording, from `inputs` (fresh leaves
  // over the saved inputs).
  std::vector<at::Tensor> recompute(const std::vector<at::Tensor>& inputs) const;
  // The edges gradients are captured at: the fresh inputs' that need a gradient, then the
  // node's own edges to tensors outside the region.
  torch::autograd::edge_list capture_edges(const std::vector<at::Tensor>& inputs) const;

  RegionRecord record_;
  size_t input_edges_ = 0;
  bool released_ = false;
};

}  // namespace cohort::activation_checkpoint
