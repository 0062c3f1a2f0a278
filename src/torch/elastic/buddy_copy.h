// Buddy copies: how a sharded elastic job keeps every shard on two members.
//
// Note [Buddy copies]
// Under ZeRO and FSDP each member's optimizer steps only its own ranges of the parameters, and
// holds the only copy of their optimizer state (and, under FSDP, of their values). So each
// member r also keeps a copy of its ring predecessor's (r - 1 mod W) ranges: values and
// optimizer state, stepped by an optimizer of its own (made by the user's factory). The copy
// must be at the committed step, whatever phase a member dies in, so it is not sent after the
// step (a member killed between its commit and that send would take the newest state of its
// ranges with it). Instead, before the commit vote, each member sends its successor its
// ranges' averaged gradients (one send and one receive per step: 1/W of the gradients), and
// after the vote both step: the owner its ranges, the successor its copy, with the same
// optimizer on the same state and gradient (the optimizers taken update each element from its
// own state: Note [Re-sliced state]). A member whose vote failed while others committed has
// both gradients still, and steps them when the next generation shows that the step
// committed (ShardedRun::catch_up). So after any single failure, and after several whose
// members are not ring neighbours, the survivors hold every range at the committed step; the
// next generation re-slices them for its ranges (piece_exchange.h). A member and its
// predecessor lost together lose the predecessor's ranges: the trainer resumes from the last
// checkpoint, or throws ElasticError naming them.
//
// Costs per step: the gradient send/receive (1/W of the gradients) and an optimizer step over
// 1/W of the parameters; memory: 1/W of the parameters plus their optimizer state.
#pragma once

#include <torch/torch.h>

#include "cohort/comm/group.h"
#include "elastic/held_pieces.h"

namespace cohort::detail {

// Sends the gradients of `own`'s tensors to this rank's successor and receives the
// predecessor's into `buddy`'s tensors' .grad (an undefined gradient stays undefined, so that
// the optimizer skips the tensor on both). Collective over the ring; with one member, nothing.
void exchange_buddy_gradients(Group& group, const HeldPieces& own, HeldPieces& buddy);

// The tensors of `pieces` under their parameters' names (what the optimizer factory takes).
torch::OrderedDict<std::string, torch::Tensor> named_tensors(const HeldPieces& pieces);

}  // namespace cohort::detail
