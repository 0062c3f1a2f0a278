// Note [MPI tags]: how cohort's message tags become MPI's.
//
// cohort matches messages by (peer, channel, step), both 64-bit; MPI by (source, int tag,
// communicator). Collective messages go on their own communicator with a tag packed from the
// step alone. The sequence number is not needed: MPI never lets a message overtake an earlier
// one with the same (source, tag, communicator), and every rank sends and receives the
// messages of collective s before those of s + 1, so a tag reused by a later collective still
// matches in order. What must differ are the tags of one collective's messages between the
// same two ranks, which may be posted in any order. The algorithms build steps as
// (phase << 56 | ring step << 28 | segment) or (round << 32 | segment) with small phases,
// rounds below 256, ring steps below the world size and modest segment counts; the packing
// keeps those distinct and refuses (ProtocolError) a step it cannot represent.
//
// Point-to-point messages (Group::send/recv) go on a third communicator with the user's tag:
// they are matched in issue order per (peer, tag), which MPI's ordering gives directly.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/core/error.h"

namespace cohort::mpi {

class TagPacker {
 public:
  // `tag_ub`: MPI_TAG_UB (at least 32767 by the standard; 2^31 - 1 in OpenMPI). Too small a
  // one only fails the calls that need the tags.
  explicit TagPacker(int64_t tag_ub) : tag_ub_(tag_ub), bits_(bit_width(tag_ub)) {}

  int collective_tag(uint64_t step) const {
    if (bits_ < kPhaseBits + kMiddleBits + kMinSegmentBits) {
      throw ConfigError("this MPI's MPI_TAG_UB (" + std::to_string(tag_ub_) +
                        ") leaves too few tag bits for cohort's algorithms over MPI "
                        "point-to-point; use MPI's own collectives "
                        "(COHORT_MPI_COLLECTIVES=mpi)");
    }
    const uint64_t phase = step >> 56;
    const uint64_t middle = (step >> 28) & ((uint64_t{1} << 28) - 1);
    const uint64_t segment = step & ((uint64_t{1} << 28) - 1);
    const int segment_bits = bits_ - kPhaseBits - kMiddleBits;
    if (phase >= (uint64_t{1} << kPhaseBits) || middle >= (uint64_t{1} << kMiddleBits) ||
        segment >= (uint64_t{1} << segment_bits)) {
      throw ProtocolError("message step " + std::to_string(step) +
                          " does not fit MPI's tag space (phase " + std::to_string(phase) +
                          ", round or ring step " + std::to_string(middle) + ", segment " +
                          std::to_string(segment) +
                          "); use MPI's own collectives "
                          "(COHORT_MPI_COLLECTIVES=mpi) for groups this large");
    }
    return static_cast<int>((phase << (kMiddleBits + segment_bits)) | (middle << segment_bits) |
                            segment);
  }

  int max_tag() const { return static_cast<int>((int64_t{1} << bits_) - 1); }

 private:
  static constexpr int kPhaseBits = 2;
  static constexpr int kMiddleBits = 12;  // ring steps < 4096 ranks; round << 4 for rounds < 256
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
