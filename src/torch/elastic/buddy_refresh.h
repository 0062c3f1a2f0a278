// The refresh of buddy copies (Note [Buddy copies] in buddy_copy.h): each member sends its
// successor its own ranges' values and optimizer state as they are, and takes its
// predecessor's in place of its copy.
//
// What travels, per direction, in one Group::ring_shift (padded to the largest member's, after
// an allreduce of the sizes): a JSON header (for each tensor: whether the optimizer keeps
// state for it, its step, and its state tensors' names and dtypes), then each tensor's values
// and state tensors end to end (64-byte aligned). The message is sent from the group's
// registered memory, so that a successor on the same host reads it in place. Under ZeRO the values
// stay home: every member holds the whole parameters at the committed step (the publish), and
// takes its copy's ranges of them. The copy's state (and FSDP's values) become views of the
// received buffer (copies of it on a copy's device other than the host), so nothing is copied
// on arrival, and nothing of the copy changes until the whole buffer is in: a member that dies
// mid-refresh leaves its successor's copy (and log) as they were. The buffers are kept from one
// refresh to the next (the one the copy was a view of receives the next), so that a refresh does
// not pay page faults for its memory.
#pragma once

#include <memory>

#include "cohort/comm/group.h"
#include "elastic/buddy_log.h"
#include "elastic/held_pieces.h"

namespace cohort::detail {

class BuddyRefresher {
 public:
  // `own`: this member's ranges and optimizer; `copy`: its buddy copy of its predecessor's
  // ranges (the same ranges the predecessor's `own` holds), and `log` the steps logged for it,
  // emptied when the refreshed copy is installed. Collective over the ring; with one member,
  // nothing.
  void refresh(Group& group, const HeldPieces& own, HeldPieces& copy, BuddyLog& log);
  // Lets the buffers go (the copy's ranges change).
  void reset();

 private:
  const torch::Tensor& outgoing_buffer(Group& group, int64_t bytes);

  std::shared_ptr<RegisteredMemory> outgoing_memory_;
  torch::Tensor outgoing_;   // what this member sent last: a view of outgoing_memory_
  torch::Tensor installed_;  // what the copy's state is a view of
  torch::Tensor spare_;      // the buffer the copy was a view of before, for the next refresh
};

}  // namespace cohort::detail
