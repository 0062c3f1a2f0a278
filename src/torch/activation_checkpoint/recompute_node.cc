// Note [Recompute node]
// A checkpointed region is one node of the autograd graph. Its inputs (the node's next edges)
// are the region's inputs that need a gradient and every tensor outside the region that the
// region reads and that needs a gradient: parameters (their AccumulateGrad, or FSDP's gradient
// node), activations it captured (their grad_fn). checkpoint() found those by running the
// region once with autograd recording and walking the graph it recorded (checkpoint.cc, Note
// [Region edges]); that graph, and the activations it saved, were then dropped.
//
// When backward reaches the node, apply() runs the region again on the saved inputs, with
// grad mode on, the generators set to their state before the forward (then put back: backward
// draws nothing from them) and the forward's autocast state, so that it records the same
// operators with the same values. It then runs a nested backward over the recorded graph, from
// the recomputed outputs with the gradients the node received, capturing (not accumulating)
// the gradients that arrive at each of the node's next edges, and returns them. The outer
// backward delivers them along those edges: a parameter gets one gradient from this node per
// backward, summed by autograd with any other use, exactly as without checkpointing. That is
// what keeps DDP (one ready call per parameter and step: PyTorch's reentrant checkpoint, which
// accumulates into .grad from inside the nested backward, makes DDP see parameters "marked
// ready twice", pytorch#70865), FSDP (one call of a unit's gradient node) and
// find_unused_parameters (the parameters are in the graph at the end of forward) unchanged.
//
// The inputs are held as detached aliases, so their version counters are the caller's: an
// in-place change after the forward is caught here instead of recomputing from other values.
// Buffers listed in restore_after_recompute (BatchNorm's running statistics) are copied before
// the recomputation and put back after the nested backward (not before: batch_norm saves them
// for its backward, which would refuse them changed), so the forward's update counts once.

#include "activation_checkpoint/recompute_node.h"

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort::activation_checkpoint {

namespace {

// Copies of `buffers` now, put back when it leaves the scope (also when the recomputation or
// the nested backward throws).
class BufferSnapshot {
 public:
  explicit BufferSnapshot(const std::vector<at::Tensor>& buffers) : buffers_(buffers) {
    at::NoGradGuard no_grad;
    for (const auto& b : buffers_) copies_.push_back(b.defined() ? b.clone() : at::Tensor());
  }
  ~BufferSnapshot() {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (buffers_[i].defined()) buffers_[i].copy_(copies_[i]);
    }
  }
  BufferSnapshot(const BufferSnapshot&) = delete;
  BufferSnapshot& operator=(const BufferSnapshot&) = delete;

 private:
  std::vector<at::Tensor> buffers_;
  std::vector<at::Tensor> copies_;
};

// Sets the forward's generators to their state then, and puts them back to their state now when
// it leaves the scope.
class RngFork {
 public:
  explicit RngFork(const RngSnapshot& forward) : now_(forward.current()) { forward.restore(); }
  ~RngFork() { now_.restore(); }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  RngSnapshot now_;
};

}  // namespace

void own_outputs(std::vector<at::Tensor>& outputs, uint64_t first) {
  const uint64_t end = at::sequence_number::peek();
  for (auto& output : outputs) {
    if (!output.requires_grad()) continue;
    const auto& grad_fn = output.grad_fn();
    const bool recorded = grad_fn != nullptr && grad_fn->sequence_nr() >= first &&
                          grad_fn->sequence_nr() < end;
    if (!recorded) output = output.view_as(output);
  }
}

RecomputeNode::RecomputeNode(RegionRecord record, torch::autograd::edge_list edges)
    : record_(std::move(record)) {
  for (bool requires_grad : record_.input_requires_grad) input_edges_ += requires_grad ? 1 : 0;
  COHORT_INTERNAL_ASSERT(edges.size() >= input_edges_, "a checkpoint node with too few edges");
  set_next_edges(std::move(edges));
}

std::string region_label(const CheckpointOptions& options) {
  return options.name.empty() ? "a checkpointed region"
                              : "the checkpointed region '" + options.name + "'";
}

void RecomputeNode::release_variables() {
  record_.inputs.clear();
  record_.region = nullptr;
  record_.options.restore_after_recompute.clear();
  released_ = true;
}

void RecomputeNode::check_inputs_unchanged() const {
  for (size_t i = 0; i < record_.inputs.size(); ++i) {
    const int64_t now = record_.inputs[i]._version();
    COHORT_CHECK(now == record_.input_versions[i], "backward of ", region_label(record_.options), ": its input ",
                 i, " was changed in place after the region's forward (version ",
                 record_.input_versions[i], ", now ", now,
                 "), so recomputing the region would give other activations and a wrong "
                 "gradient. Change a clone() of it instead, or do not checkpoint this region");
  }
}

std::vector<at::Tensor> RecomputeNode::recompute(const std::vector<at::Tensor>& inputs) const {
  RngFork rng(record_.rng);
  AutocastRestore autocast(record_.autocast);
  std::vector<at::Tensor> outputs;
  {
    torch::autograd::AutoGradMode grad(true);
    const uint64_t first = at::sequence_number::peek();
    outputs = record_.region(inputs);
    own_outputs(outputs, first);
  }
  const auto& forward = record_.outputs;
  COHORT_CHECK(outputs.size() == forward.size(), "backward of ", region_label(record_.options),
               ": its recomputation returned ", outputs.size(), " tensors, its forward ",
               forward.size(), "; a checkpointed region must compute the same thing both times");
  for (size_t i = 0; i < outputs.size(); ++i) {
    COHORT_CHECK(outputs[i].sizes().vec() == forward[i].sizes &&
                     outputs[i].scalar_type() == forward[i].dtype,
                 "backward of ", region_label(record_.options), ": its recomputation's output ",
                 i, " is ", c10::toString(outputs[i].scalar_type()), " ", outputs[i].sizes(),
                 ", its forward's was ", c10::toString(forward[i].dtype), " ",
                 c10::IntArrayRef(forward[i].sizes),
                 "; a checkpointed region must compute the same thing both times");
  }
  return outputs;
}

torch::autograd::edge_list RecomputeNode::capture_edges(
    const std::vector<at::Tensor>& inputs) const {
  torch::autograd::edge_list edges;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (record_.input_requires_grad[i])
      edges.push_back(torch::autograd::impl::gradient_edge(inputs[i]));
  }
  edges.insert(edges.end(), next_edges().begin() + static_cast<std::ptrdiff_t>(input_edges_),
               next_edges().end());
  return edges;
}

torch::autograd::variable_list RecomputeNode::apply(torch::autograd::variable_list&& gradients) {
  COHORT_CHECK(!released_, "backward through ", region_label(record_.options),
               " a second time: its saved inputs were freed after the first backward; pass "
               "retain_graph = true to the first backward to keep them");
  COHORT_CHECK(!at::GradMode::is_enabled(), "backward of ", region_label(record_.options),
               " with create_graph = true: higher-order gradients through a checkpointed region "
               "are not supported (the recomputation starts from detached inputs); do not "
               "checkpoint this region, or take first-order gradients only");
  check_inputs_unchanged();
  std::vector<at::Tensor> inputs;
  for (size_t i = 0; i < record_.inputs.size(); ++i) {
    at::Tensor input = record_.inputs[i].detach();
    if (record_.input_requires_grad[i]) input.requires_grad_(true);
    inputs.push_back(std::move(input));
  }
  // Put back after the nested backward: the recorded graph saved the buffers (batch_norm does)
  // and would refuse them changed.
  BufferSnapshot buffers(record_.options.restore_after_recompute);
  std::vector<at::Tensor> outputs = recompute(inputs);

  torch::autograd::edge_list roots;
  torch::autograd::variable_list root_gradients;
  size_t slot = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!record_.outputs[i].requires_grad) continue;
    const at::Tensor& gradient = gradients[slot++];
    if (!gradient.defined()) continue;
    COHORT_CHECK(outputs[i].requires_grad(), "backward of ", region_label(record_.options), ": its output ", i,
                 " needed a gradient in the forward but not in the recomputation; a "
                 "checkpointed region must compute the same thing both times");
    roots.push_back(torch::autograd::impl::gradient_edge(outputs[i]));
    root_gradients.push_back(gradient);
  }
  const torch::autograd::edge_list captured = capture_edges(inputs);
  torch::autograd::variable_list result(captured.size());
  if (!roots.empty()) {
    result = torch::autograd::Engine::get_default_engine().execute(
        roots, root_gradients, /*keep_graph=*/false, /*create_graph=*/false,
        /*accumulate_grad=*/false, captured);
  }
  return result;  // `buffers` are put back here, after the nested backward
}

}  // namespace cohort::activation_checkpoint
