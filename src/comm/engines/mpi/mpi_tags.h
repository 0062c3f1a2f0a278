// Note [MPI tags]: how cohort's message tags become MPI's.
//
// cohort matches messages by (peer, channel, step), both 64-bit; MPI by (source, int tag,
// communicator). Collective messages go on their own communicator with a tag packed from the
// step alone. The sequence number is not needed: MPI never lets a message overtake an earlier
// one with the same (source, tag, communicator), and every rank sends and receives the
// messages of collective s before those of s + 1, so a tag reused by a later collective still
// matches in order. What must differ are the tags of one collective's messages between the
// same two ranks, which may be posted in any order. Every algorithm numbers them as a Step
// (round, segment) (Note [Message steps] in algorithms/step.h); the packing puts the round in
// kRoundBits and the segment in the rest of MPI_TAG_UB, and refuses (ProtocolError) a step it
// cannot represent.
//
// Point-to-point messages (Group::send/recv) go on a third communicator with the user's tag:
// they are matched in issue order per (peer, tag), which MPI's ordering gives directly.
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/step.h"
#include "cohort/core/error.h"

namespace cohort::mpi {

class TagPacker {
 public:
  // `tag_ub`: MPI_TAG_UB (at least 32767 by the standard; 2^31 - 1 in OpenMPI). Too small a
  // one only fails the calls that need the tags.
  explicit TagPacker(int64_t tag_ub) : tag_ub_(tag_ub), bits_(bit_width(tag_ub)) {}

  int collective_tag(uint64_t wire) const {
    if (bits_ < kRoundBits + kMinSegmentBits) {
      throw ConfigError("this MPI's MPI_TAG_UB (" + std::to_string(tag_ub_) +
                        ") leaves too few tag bits for cohort's algorithms over MPI "
                        "point-to-point; use MPI's own collectives "
                        "(COHORT_MPI_COLLECTIVES=mpi)");
    }
    const algo::Step step = algo::step_from_wire(wire);
    const int segment_bits = bits_ - kRoundBits;
    if (step.round >= (uint64_t{1} << kRoundBits) ||
        step.segment >= (uint64_t{1} << segment_bits)) {
      throw ProtocolError("message round " + std::to_string(step.round) + ", segment " +
                          std::to_string(step.segment) +
                          " does not fit MPI's tag space; use MPI's own collectives "
                          "(COHORT_MPI_COLLECTIVES=mpi) for groups or messages this large");
    }
    return static_cast<int>((uint64_t{step.round} << segment_bits) | step.segment);
  }

  int max_tag() const { return static_cast<int>((int64_t{1} << bits_) - 1); }

 private:
  // Rounds: the ring allreduce's 2(n - 1) steps for groups of up to 8192 ranks; segments: the
  // rest (17 bits with OpenMPI's 2^31 - 1, 131072 segments of a round).
  static constexpr int kRoundBits = 14;
  static constexpr int kMinSegmentBits = 8;

  static int bit_width(int64_t tag_ub) {
    int bits = 0;
    while (bits < 31 && (int64_t{1} << (bits + 1)) - 1 <= tag_ub) ++bits;
    return bits;
  }

  int64_t tag_ub_;
  int bits_;
};

}  // namespace cohort::mpi
