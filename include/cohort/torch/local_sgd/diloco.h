// DiLoCo and Streaming DiLoCo: local SGD with an outer optimizer, for slow links.
//
// Each rank trains its own copy of the model with its own (inner) optimizer, without
// communicating, for H steps. Then the ranks average their pseudo-gradients, the change of the
// model since the last synchronization (the outer parameters minus the rank's parameters), and
// an outer optimizer steps the outer parameters with that average as their gradient; every
// rank's model becomes the new outer parameters (Douillard et al., "DiLoCo: Distributed
// Low-Communication Training of Language Models", 2023: AdamW inside, Nesterov SGD outside).
// Streaming DiLoCo (Douillard et al., 2025) cuts the model into F fragments synchronized at
// staggered steps (fragment f at the steps s with s mod H = f H / F), so that each round sends
// 1/F of the model and the peak bandwidth falls F-fold, and may send the pseudo-gradients in
// bfloat16.
//
//   cohort::DiLoCoOptions options;
//   options.inner_steps = 50;                       // H
//   options.fragments = 4;                          // F (1: plain DiLoCo)
//   cohort::DiLoCo diloco(group, *model, options);  // collective: rank 0's model everywhere
//   for (auto& batch : *loader) {                   // the model itself, no DDP
//     optimizer.zero_grad();
//     loss_fn(model->forward(batch.data), batch.target).backward();
//     optimizer.step();                             // the inner optimizer (AdamW, say)
//     diloco.step();                                // every rank, after every inner step
//   }
//
// With H = 1, one fragment, outer_lr 1 and outer_momentum 0 (plain SGD outside) it is DDP with
// the inner optimizer SGD (the average of the ranks' steps is the step of the averaged
// gradient). docs/compression.md, "DiLoCo".
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/work.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/ddp/comm_hook.h"

namespace cohort {
namespace detail {
class ElasticDiLoCo;
}  // namespace detail

struct DiLoCoOptions {
  // Inner steps between two synchronizations of a fragment (H).
  int64_t inner_steps = 50;
  // Fragments of the model (F), synchronized at staggered steps; 1 synchronizes the whole model
  // at once. The trainable parameters, in registration order, are cut into F runs of about the
  // same number of elements. At most the number of trainable parameters.
  int64_t fragments = 1;
  // What the pseudo-gradients travel as: torch::kFloat32 or torch::kBFloat16 (half the bytes;
  // the average is taken in bfloat16 and applied in float32).
  torch::Dtype wire_dtype = torch::kFloat32;
  // The outer optimizer, over the outer parameters (float32 copies of the trainable parameters,
  // in order). Unset: SGD with DiLoCo's outer_lr and outer_momentum, Nesterov where the momentum
  // is above 0 (momentum 0: plain SGD, which with outer_lr 1 and inner_steps 1 is DDP). Any
  // torch::optim optimizer works: it is stepped with gradients set only on the fragment being
  // synchronized (torch::optim skips parameters without a gradient).
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>
      outer_optimizer;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  // Streaming DiLoCo's overlap (tau): a fragment's allreduce starts at its step and is waited
  // for, and applied, this many inner steps later, so the communication runs beside those
  // steps. 0: applied at once. Less than inner_steps.
  int64_t overlap_steps = 0;
  // When a round is applied after overlap_steps, the fragment's local parameters, which kept
  // training meanwhile, become merge_local * local + (1 - merge_local) * outer (0: the outer
  // values, dropping those steps' local progress; Streaming DiLoCo mixes, e.g. 0.5).
  double merge_local = 0.0;
  // How each fragment's pseudo-gradients are averaged: a DDP communication hook (comm_hook.h),
  // handed each round as a GradBucket (index: the fragment; iteration: the fragment's round
  // count; buffer: its float32 pseudo-gradients). The compression hooks then send them
  // quantized or sparsified, with their error feedback carrying what a round left out into the
  // fragment's next one: qsgd_hook({.error_feedback = true}), sign_hook(), topk_hook(), ...
  // Unset: one averaging allreduce in wire_dtype. With a hook, wire_dtype must stay float32
  // (bf16_compress_hook() is the hook form). Each rank needs its own hook object.
  std::shared_ptr<CommHook> hook;
  // Hierarchical DiLoCo: plain data parallelism inside each node, DiLoCo across nodes. The
  // caller keeps the models of a node's ranks equal (DDP over a group of the node's ranks:
  // group->split(group->node_rank(), group->rank())), so each node is one DiLoCo worker: a
  // round's pseudo-gradient is averaged across the nodes by the first rank of each node alone,
  // and the node's other ranks take the result from it (a broadcast inside the node). The links
  // between nodes carry one copy of each round per node, not one per rank. sent_bytes() counts
  // what a rank sent across nodes (0 on the others). The group's topology (Group::node_rank:
  // the host, or COHORT_NODE_ID) says what a node is.
  bool hierarchical = false;
};

// A DiLoCo is a CheckpointPart: put it in TrainingState::parts (say as "diloco") and a
// checkpoint keeps its outer parameters, the outer optimizer's state, the schedule's step and
// the rounds in flight, so that a resumed run goes on with them. The local parameters and the
// inner optimizer are the checkpoint's module and optimizer, rank 0's: a checkpoint taken right
// after a synchronization (synchronize_all(), or a step at which every fragment is synchronized)
// resumes exactly; one taken between synchronizations resumes every rank from rank 0's local
// model. A hook's own state (error feedback) is not kept.
class DiLoCo : public CheckpointPart {
 public:
  // Collective: checks that every rank has the same trainable parameters (shapes, dtypes),
  // copies rank 0's values to every rank, and takes them as the outer parameters. Throws
  // InvalidArgument for a null group, inner_steps < 1, fragments < 1 or more than the
  // parameters, a wire dtype other than float32 or bfloat16, outer_lr <= 0, outer_momentum
  // outside [0, 1), or parameters that are not floating-point.
  DiLoCo(std::shared_ptr<Group> group, std::vector<torch::Tensor> parameters,
         DiLoCoOptions options = {});
  // The module's trainable parameters.
  DiLoCo(std::shared_ptr<Group> group, torch::nn::Module& module, DiLoCoOptions options = {});

  // Call after every inner optimizer step, on every rank. Synchronizes the fragments that are
  // due at this step (collective); returns how many it synchronized.
  int64_t step();
  ~DiLoCo() override;
  DiLoCo(const DiLoCo&) = delete;
  DiLoCo& operator=(const DiLoCo&) = delete;

  // Applies the rounds in flight, then synchronizes now, outside the schedule and without
  // counting a step, every fragment that took inner steps since its last synchronization
  // (before evaluating or saving: every rank then holds the outer parameters). A fragment
  // synchronized at this very step (or whose round in flight was applied with merge_local 0)
  // is left alone: stepping the outer optimizer on its zero pseudo-gradient would move the
  // outer parameters by momentum alone, a step DiLoCo does not have. Returns how many
  // fragments it synchronized. Collective.
  int64_t synchronize_all();

  // The fragment each trainable parameter belongs to (in order), and where the schedule is.
  const std::vector<int64_t>& fragment_of_parameter() const { return fragment_of_; }
  int64_t inner_step() const { return step_; }
  // Bytes of pseudo-gradient this rank put into allreduces so far (hierarchical: across nodes).
  int64_t sent_bytes() const { return sent_bytes_; }
  torch::optim::Optimizer& outer_optimizer() { return *outer_; }
  // Float32 copies of the trainable parameters as of their fragment's last synchronization.
  const std::vector<torch::Tensor>& outer_parameters() const { return outer_parameters_; }

  // CheckpointPart. before_save() (every rank) finishes the reductions of the rounds in flight
  // (a hook's may be collective), which save() keeps, averaged, to be applied at their steps.
  // load() checks the saved state against this DiLoCo (the parameters' count, shapes and
  // dtypes, the fragments) and throws CheckpointError naming what differs; every rank loads the
  // same state.
  void before_save() override;
  void save(torch::serialize::OutputArchive& archive) override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  // A fragment's round: its pseudo-gradients averaging, and the step to apply it.
  struct Round {
    int64_t fragment = 0;
    torch::Tensor flat;            // pseudo-gradients; their average once the round ended
    std::shared_ptr<Work> work;    // null where this rank does not reduce (hierarchical)
    std::function<void()> finish;  // a hook's, after work
    int64_t apply_at = 0;
    double scale = 1.0;  // of the average when applied (ElasticTrainer: members without progress)
  };
  friend class detail::ElasticDiLoCo;  // ElasticTrainer's: rounds over each generation's group
  // `agree` false: no collectives (no check, no broadcast of rank 0's values): ElasticTrainer
  // compared the models at its rendezvous and heals every member from rank 0.
  DiLoCo(std::shared_ptr<Group> group, std::vector<torch::Tensor> parameters, DiLoCoOptions options,
         bool agree);
  void start_reduction(Round& round);
  Round start(int64_t fragment);
  void apply(Round& round, double merge_local);
  bool due(int64_t fragment, int64_t step) const;
  void apply_due_rounds();
  std::vector<int64_t> saved_synchronized_at(torch::serialize::InputArchive& archive,
                                             int64_t step) const;

  std::shared_ptr<Group> group_;
  std::shared_ptr<Group> node_group_;  // hierarchical: this rank's node
  std::shared_ptr<Group> across_;      // who averages the rounds: group_, or (hierarchical) the
                                       // nodes' first ranks (null on the others)
  DiLoCoOptions options_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> outer_parameters_;
  std::vector<int64_t> fragment_of_;
  std::vector<std::vector<size_t>> members_;  // per fragment: its parameters' indices
  std::unique_ptr<torch::optim::Optimizer> outer_;
  int64_t step_ = 0;
  int64_t sent_bytes_ = 0;
  std::vector<Round> in_flight_;             // in the order they started
  std::vector<int64_t> rounds_of_fragment_;  // a hook's GradBucket::iteration
  // Per fragment: the inner step up to which its local parameters' progress went into a round
  // (the step its last round started at, or the step a round set them to the outer values).
  // synchronize_all() skips a fragment whose entry is the current step.
  std::vector<int64_t> synchronized_at_;
};

}  // namespace cohort
