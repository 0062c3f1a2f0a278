// Note [Message steps]: how the messages of one collective are told apart.
//
// Two ranks may exchange several messages within one collective, posted in any order, so
// every message carries a Step: the algorithm's round (a phase, a ring step, a tree level,
// numbered by the algorithm from 0) and the segment within that round's transfer. Every
// algorithm numbers its messages this way and no other; the transports carry the step as the
// 64-bit Tag::step (wire_step), and a transport that needs a narrower tag (MPI's int tag)
// unpacks it with step_from_wire, in one place (engines/mpi/mpi_tags.h). The collective's
// sequence number travels beside it (Tag::channel), so rounds restart from 0 in every
// collective.
#pragma once

#include <cstdint>

namespace cohort::algo {

struct Step {
  uint32_t round = 0;
  uint32_t segment = 0;
  // Implicit from a round: `ctx.send(peer, 0, ...)` is round 0's only message.
  Step(uint32_t r = 0, uint32_t s = 0) : round(r), segment(s) {}  // NOLINT
};

inline uint64_t wire_step(Step step) {
  return (uint64_t{step.round} << 32) | step.segment;
}
inline Step step_from_wire(uint64_t wire) {
  return Step(static_cast<uint32_t>(wire >> 32), static_cast<uint32_t>(wire));
}

}  // namespace cohort::algo
