// ElasticTrainer's DiLoCo (ElasticTrainerOptions::diloco): one cohort::DiLoCo for the whole job,
// whose rounds go over each generation's group, and what a member that joins takes from rank 0.
//
// Note [Elastic DiLoCo]
// The inner steps communicate nothing, so they cannot fail for a peer: a member lost during them
// is noticed by the next synchronization's reduction (its peers' allreduce fails, or times out).
// A step that synchronizes runs: the inner step, the rounds' reductions, the commit vote
// (Note [Elastic commit]), and only then the rounds' outer steps. A failure before the vote
// leaves every survivor's outer state as it was, and its local parameters as the inner step left
// them; the next generation redoes the synchronization alone (not the inner step) over the
// members left, so the survivors' progress since the last synchronization is kept and the lost
// member's is dropped (with the samples it took in those steps). A member that receives rank 0's
// state (one that joins, or one whose vote failed where rank 0's passed) takes the outer
// parameters, the outer optimizer's state and the round counts, and starts its inner steps
// from the outer parameters and rank 0's buffers. The inner optimizer's state stays each
// member's own, as in DiLoCo (a joiner's starts empty: its first Adam steps are bias-corrected
// as at the start of a run; copying rank 0's would cost every member a copy of it). Such a member
// has no progress to contribute to a synchronization being redone: its pseudo-gradient is zero, and
// the average is taken over the members that have some (one small allreduce counts them).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "cohort/comm/group.h"
#include "cohort/torch/local_sgd/diloco.h"

namespace cohort::detail {

class ElasticDiLoCo {
 public:
  // Throws InvalidArgument for options that elastic membership cannot run with (hierarchical,
  // overlap_steps > 0).
  ElasticDiLoCo(torch::nn::Module& module, DiLoCoOptions options);
  ~ElasticDiLoCo();

  // Rounds in flight on a broken generation end, unapplied.
  void drop_rounds();
  // A new generation over `group`: the first builds the DiLoCo (over this member's parameters,
  // until heal() gives it rank 0's), the others move its rounds to `group`. Not collective.
  void adopt(std::shared_ptr<Group> group);
  // Rank 0's outer state on every member; a receiver's parameters become the outer ones and its
  // buffers rank 0's. Collective.
  void heal(Group& group, bool receiver);

  // Whether the step with this number (committed steps before it) synchronizes fragments.
  bool synchronizes_at(int64_t step) const;
  // Runs that step's rounds' reductions to their end. `redo`: the synchronization of a step whose
  // inner step is done, over a new generation, whose members may hold no progress (collective
  // count).
  void reduce_rounds(int64_t step, bool redo);
  // The outer steps of the rounds started (after the commit vote).
  void apply_rounds();

  // ElasticFinish::synchronize: whether a fragment took inner steps since its last round, after
  // `committed` steps; and the rounds of those fragments, run to their end as a step's are
  // (`redo`: over a new generation, as in reduce_rounds). The synchronization counts as step
  // `committed`, without an inner step.
  bool needs_synchronization(int64_t committed) const;
  void reduce_unsynchronized(int64_t committed, bool redo);

  // This member's inner step of step `step` (committed steps before it) is done: it has progress
  // for the synchronization, and DiLoCo's step count follows the job's.
  void note_progress(int64_t step);
  DiLoCo& diloco();
  // The CheckpointPart of a replica checkpoint (null before the first generation).
  CheckpointPart* part() { return diloco_.get(); }

 private:
  double scale_for_members_with_progress(Group& group);
  // The rounds of the fragments f for which starts(f, DiLoCo's step after `step`) holds, as the
  // synchronization of step `step` (redo: see reduce_rounds), run to their end.
  void reduce_rounds_where(int64_t step, bool redo,
                           const std::function<bool(int64_t, int64_t)>& starts);
  void finish_reductions();

  torch::nn::Module& module_;
  DiLoCoOptions options_;
  std::unique_ptr<DiLoCo> diloco_;
  bool has_progress_ = true;
};

}  // namespace cohort::detail
