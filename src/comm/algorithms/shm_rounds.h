// The building blocks of every shared-memory collective (transport/shm/shm_window.h).
//
// A buffer is cut into one piece per rank of the window (the pieces of an allreduce, the
// blocks of a reduce-scatter or all-gather). The pieces are walked together in rounds: round j
// covers elements [j*s, (j+1)*s) of every piece, with s chosen so that one round's parts of
// all n pieces fill one slot. A round of either kind costs one post-and-wait:
//   reduce-scatter round: each rank copies the parts of the others' pieces into its slot;
//     (all posted) each rank reduces its own part, reading the peers' copies in their slots;
//   all-gather round: each rank copies its own part into its slot; (all posted) each rank
//     copies the others' parts out of their slots.
// An allreduce is a reduce-scatter round then an all-gather round per j, so a chunk is still
// in cache when it comes back.
//
// Note [Slot reuse]
// Round g writes slot g % 2 of each rank, and only the writer's own slot. That slot was last
// written in round g - 2, and the peers read it after the wait of round g - 2 and before they
// post round g - 1. A rank starting round g has seen every peer post round g - 1, so all reads
// of round g - 2 are done: one wait per round is enough, with no second flag.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/chunking.h"

namespace cohort::algo {

class ShmRounds {
 public:
  // `pieces[p]` (in elements of esize bytes) belongs to rank p of ctx.shm().
  ShmRounds(Context& ctx, std::vector<Range> pieces, size_t esize, const char* what);

  size_t rounds() const { return rounds_; }
  // Round j's part of piece p, in elements from the start of the buffer.
  Range part(int p, size_t j) const;

  // Reduces round j of this rank's piece over all ranks: reads every rank's `in` (the whole
  // buffer), writes this rank's part at own_out + j*s (own_out: where this rank's piece
  // goes; it may be `in` + the piece's offset). Divides by `divisor` when it is above 1.
  void reduce_scatter(size_t j, const uint8_t* in, uint8_t* own_out, DType dtype, ReduceOp op,
                      int divisor);
  // Copies round j of every rank's piece into `out` (the whole buffer); this rank's comes
  // from own_in + j*s (it may already be in `out`).
  void all_gather(size_t j, const uint8_t* own_in, uint8_t* out);

 private:
  Context& ctx_;
  std::vector<Range> pieces_;
  size_t esize_;
  const char* what_;
  size_t part_elems_ = 1;  // s
  size_t rounds_ = 0;
};

// Pieces of an allreduce: chunk_range of count over n ranks.
std::vector<Range> even_pieces(size_t count, int n);
// Pieces of a reduce-scatter or all-gather: n blocks of `block` elements.
std::vector<Range> block_pieces(size_t block, int n);

}  // namespace cohort::algo
