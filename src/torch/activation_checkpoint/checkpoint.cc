// cohort::checkpoint (include/cohort/torch/activation_checkpoint/checkpoint.h): the forward of a
// checkpointed region; its backward is RecomputeNode (Note [Recompute node]).
//
// Note [Region edges]
// The region runs once with autograd recording, on detached aliases of its inputs (fresh
// leaves where an input needs a gradient). Every node it records gets a sequence number from
// the thread's counter, so the region's own nodes are those numbered between the counter before
// and after the call. Walking the graph from the outputs through those nodes, an edge that leaves
// them goes either to one of the fresh inputs' accumulators (a region input) or to something
// outside the region that needs a gradient: a parameter's AccumulateGrad, FSDP's gradient node
// of a unit, the grad_fn of a captured activation. Those edges become the region node's inputs.
// Their identity is stable until backward: a parameter's accumulator is kept alive by the node's
// edge to it, so the recomputation records edges to the same nodes. Then the recorded graph and
// the activations it saved are dropped with the region's outputs, which the node replaces.
// The cost is the recording of one region at a time (the same memory the recomputation needs
// in backward) and a walk of its nodes.

#include "cohort/torch/activation_checkpoint/checkpoint.h"

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <memory>
#include <set>
#include <unordered_set>
#include <utility>

#include "activation_checkpoint/recompute_node.h"
#include "cohort/core/check.h"

namespace cohort {

namespace {

using activation_checkpoint::RecomputeNode;
using activation_checkpoint::region_label;
using activation_checkpoint::RegionRecord;
using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;

void check_outputs(const std::vector<at::Tensor>& outputs, const CheckpointOptions& options) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    COHORT_CHECK(outputs[i].defined(), region_label(options), ": the region's output ", i,
                 " is an undefined tensor; a checkpointed region returns defined tensors only");
  }
  // Outputs share the region's node each through a slot of their own: autograd would no longer
  // know that one views another, and an in-place change of one would give the other a wrong
  // gradient.
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = i + 1; j < outputs.size(); ++j) {
      COHORT_CHECK(!(outputs[i].requires_grad() && outputs[j].requires_grad() &&
                     outputs[i].is_alias_of(outputs[j])),
                   region_label(options), ": the region's outputs ", i, " and ", j,
                   " share memory (the same tensor, or one a view of the other); return each "
                   "once (or a clone()) and make the view outside the region");
    }
  }
}

// The edges that leave the nodes numbered [first, end) (Note [Region edges]), except those to
// the accumulators of the region's own inputs; each once.
edge_list edges_leaving_region(const std::vector<at::Tensor>& outputs,
                               const std::vector<at::Tensor>& region_inputs, uint64_t first,
                               uint64_t end) {
  auto inside = [&](const Node* node) {
    return node->sequence_nr() >= first && node->sequence_nr() < end;
  };
  std::unordered_set<const Node*> input_accumulators;
  for (const auto& input : region_inputs) {
    if (auto accumulator = torch::autograd::impl::try_get_grad_accumulator(input))
      input_accumulators.insert(accumulator.get());
  }
  std::vector<Node*> pending;
  std::unordered_set<const Node*> seen;
  for (const auto& output : outputs) {
    Node* node = output.grad_fn().get();
    if (node != nullptr && seen.insert(node).second) pending.push_back(node);
  }
  edge_list leaving;
  std::set<std::pair<const Node*, uint32_t>> leaving_keys;
  while (!pending.empty()) {
    Node* node = pending.back();
    pending.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.is_valid()) continue;
      Node* next = edge.function.get();
      if (inside(next)) {
        if (seen.insert(next).second) pending.push_back(next);
        continue;
      }
      if (input_accumulators.count(next) > 0) continue;
      if (leaving_keys.insert({next, edge.input_nr}).second) leaving.push_back(edge);
    }
  }
  return leaving;
}

std::vector<at::Tensor> region_inputs_of(const std::vector<at::Tensor>& inputs,
                                         const CheckpointOptions& options) {
  std::vector<at::Tensor> region_inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    COHORT_CHECK(inputs[i].defined(), region_label(options), ": input ", i,
                 " is an undefined tensor; pass defined tensors (capture optional ones in the "
                 "region instead)");
    at::Tensor alias = inputs[i].detach();
    if (inputs[i].requires_grad()) alias.requires_grad_(true);
    region_inputs.push_back(std::move(alias));
  }
  return region_inputs;
}

// The region run once with autograd recording (Note [Region edges]): its outputs and the
// sequence numbers of the nodes it recorded.
struct RecordedRun {
  std::vector<at::Tensor> outputs;
  uint64_t first = 0;
  uint64_t end = 0;
};

RecordedRun run_recording(const CheckpointRegion& region, const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& region_inputs,
                          const CheckpointOptions& options) {
  std::vector<int64_t> versions_before;
  for (const auto& input : inputs) versions_before.push_back(input._version());
  RecordedRun run;
  run.first = at::sequence_number::peek();
  run.outputs = region(region_inputs);
  check_outputs(run.outputs, options);
  activation_checkpoint::own_outputs(run.outputs, run.first);
  run.end = at::sequence_number::peek();
  for (size_t i = 0; i < inputs.size(); ++i) {
    COHORT_CHECK(inputs[i]._version() == versions_before[i], region_label(options),
                 ": the region changed its input ", i,
                 " in place, so its recomputation in backward would start from other values. "
                 "Change a clone() of the input inside the region instead");
  }
  return run;
}

// The region's outputs as outputs of `node` (detached from the recorded graph, which goes with
// the recorded outputs); those that need no gradient as they are.
std::vector<at::Tensor> outputs_of_node(const std::vector<at::Tensor>& recorded,
                                        const std::shared_ptr<RecomputeNode>& node) {
  std::vector<at::Tensor> results;
  for (const auto& output : recorded) {
    if (!output.requires_grad()) {
      results.push_back(output);
      continue;
    }
    at::Tensor result = output.detach();
    const uint32_t slot = node->add_input_metadata(result);
    torch::autograd::impl::set_gradient_edge(result, Edge(node, slot));
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace

std::vector<torch::Tensor> checkpoint_region(const CheckpointRegion& region,
                                             const std::vector<torch::Tensor>& inputs,
                                             const CheckpointOptions& options) {
  COHORT_CHECK(static_cast<bool>(region), region_label(options), ": the region is empty");
  if (!at::GradMode::is_enabled()) {
    std::vector<at::Tensor> outputs = region(inputs);
    check_outputs(outputs, options);
    return outputs;
  }
  RegionRecord record;
  record.options = options;
  record.rng = activation_checkpoint::RngSnapshot::take(options.preserve_rng_state, inputs,
                                                        options.generators);
  record.autocast = activation_checkpoint::AutocastSnapshot::take();
  const std::vector<at::Tensor> region_inputs = region_inputs_of(inputs, options);
  const RecordedRun run = run_recording(region, inputs, region_inputs, options);
  bool any_output_needs_grad = false;
  for (const auto& output : run.outputs) {
    record.outputs.push_back({output.sizes().vec(), output.scalar_type(), output.requires_grad()});
    any_output_needs_grad = any_output_needs_grad || output.requires_grad();
  }
  if (!any_output_needs_grad) return run.outputs;  // nothing the region read needs a gradient

  edge_list edges;
  for (const auto& input : inputs) {
    record.input_requires_grad.push_back(input.requires_grad());
    if (input.requires_grad()) edges.push_back(torch::autograd::impl::gradient_edge(input));
    record.inputs.push_back(input.detach());
    record.input_versions.push_back(input._version());
  }
  const edge_list leaving = edges_leaving_region(run.outputs, region_inputs, run.first, run.end);
  edges.insert(edges.end(), leaving.begin(), leaving.end());
  record.region = region;
  auto node = std::shared_ptr<RecomputeNode>(new RecomputeNode(std::move(record), std::move(edges)),
                                             torch::autograd::deleteNode);
  return outputs_of_node(run.outputs, node);  // the recorded graph goes with run.outputs
}

namespace detail {
torch::Tensor checkpoint_one(const std::function<torch::Tensor(const torch::Tensor&)>& region,
                             const torch::Tensor& input, const CheckpointOptions& options) {
  COHORT_CHECK(static_cast<bool>(region), region_label(options), ": the region is empty");
  auto one = [region](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{region(in[0])};
  };
  return checkpoint_region(one, {input}, options)[0];
}

CheckpointOptions module_region_options(const torch::nn::Module& module,
                                        const CheckpointOptions& options) {
  CheckpointOptions with_buffers = options;
  for (const auto& buffer : module.buffers()) with_buffers.restore_after_recompute.push_back(buffer);
  return with_buffers;
}
}  // namespace detail

}  // namespace cohort
