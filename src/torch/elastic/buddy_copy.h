// Buddy copies: how a sharded elastic job keeps every shard on two members.
//
// Note [Buddy copies]
// Under ZeRO and FSDP each member's optimizer steps only its own ranges of the parameters, and
// holds the only copy of their optimizer state (and, under FSDP, of their values). So each
// member r also keeps a copy of its ring predecessor's (r - 1 mod W) ranges: values and
// optimizer state, with an optimizer of its own (made by the user's factory). The copy must
// reach the committed step, whatever phase a member dies in, so nothing is sent after the step
// (a member killed between its commit and that send would take the newest state of its ranges
// with it). Instead, before the commit vote, each member sends its successor its ranges'
// averaged gradients (one Group::ring_shift per step: 1/W of the gradients, read in place out
// of the sender's registered memory within a host; BuddyGradients).
//
// The successor does not step its copy with them: stepping it every step doubled the
// optimizer's work, and the copy is needed only when a generation changes. It logs them
// (BuddyLog, buddy_log.h): each committed step's gradients with the optimizer's group options
// of that step (a schedule's learning rate). The copy is its last refresh plus its log, and is
// brought to the committed step by replaying the log (the same optimizer on the same state,
// gradients and options: the owner's arithmetic, bitwise) only when a new generation forms.
// So that the log stays short, every ElasticTrainerOptions::buddy_refresh_steps steps the owner
// sends its successor its ranges' values and optimizer state as they are at the committed step
// (buddy_refresh.h), which then replace the copy and empty the log; the refresh travels before
// that step's gradients, before the vote, and replaces the copy only once received whole.
//
// A member whose vote failed while others committed has both gradients still, and steps its own
// ranges and logs the copy's when the next generation shows that the step committed
// (ShardedRun::catch_up). So after any single failure, and after several whose members are not
// ring neighbours, the survivors hold every range at the committed step; the next generation
// re-slices them for its ranges (piece_exchange.h). A member and its predecessor lost together
// lose the predecessor's ranges: the trainer resumes from the last checkpoint, or throws
// ElasticError naming them.
//
// Costs per step: the gradients' ring shift (1/W of the gradients), and every
// buddy_refresh_steps steps one transfer of 1/W of the parameters and their optimizer state;
// memory: 1/W of the parameters and their state, plus up to buddy_refresh_steps logged 1/W
// gradients; a change replays up to buddy_refresh_steps optimizer steps over 1/W.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "cohort/comm/group.h"
#include "elastic/held_pieces.h"

namespace cohort::detail {

// The per-step transfer of the buddy gradients of one generation: every member packs its own
// ranges' gradients and one Group::ring_shift moves them to its successor. The packed
// gradients are padded to the largest member's, as a ring shift moves the same count
// everywhere, and the outgoing buffer lies in the group's registered memory, so that within a
// host the successor reads it in place (one copy of each byte besides the packing; the
// point-to-point sends it replaced went through loopback TCP: docs/bench.md, "Elastic training").
class BuddyGradients {
 public:
  // Collective: every member agrees on the padded size and registers its outgoing buffer.
  BuddyGradients(Group& group, const RankHoldings& own);

  // The elements of every packed gradient (the size of a BuddyLog::incoming buffer).
  int64_t elements() const { return elements_; }
  // Packs the gradients of `own`'s tensors and sends them to this rank's successor, receiving
  // its predecessor's into `incoming` (elements() float32), to be unpacked by unpack_gradients.
  // Collective over the ring.
  void exchange(Group& group, const RankHoldings& own, const torch::Tensor& incoming);

 private:
  int64_t elements_ = 0;
  std::shared_ptr<RegisteredMemory> memory_;
  torch::Tensor outgoing_;  // a view of memory_
};

// The elements of a packed gradient of `holdings`: one flag per tensor (1: its gradient is
// defined), then the gradients end to end, as float32.
int64_t packed_gradient_elements(const RankHoldings& holdings);

// Sets the .grad of each of `holdings`' tensors to its part of `packed` (a view, or a converted
// copy for a tensor that is not float32); an undefined gradient stays undefined, so that the
// optimizer skips the tensor as the owner's did. `packed` may be longer than
// packed_gradient_elements (padding).
void unpack_gradients(const torch::Tensor& packed, RankHoldings& holdings);

// The tensors of `pieces` under their parameters' names (what the optimizer factory takes).
torch::OrderedDict<std::string, torch::Tensor> named_tensors(const HeldPieces& pieces);

}  // namespace cohort::detail
