// Building blocks shared by the segmented algorithms: cutting a transfer into segments,
// receiving a stream of segments into a bounded window of landing slots, and the power-of-two
// fold that lets recursive halving and doubling run on any world size.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/chunking.h"
#include "algorithms/context.h"

namespace cohort::algo {

// Landing slots a receiver keeps per incoming stream: enough to overlap the transfer of the
// next segments with the reduction of the current one, while scratch stays bounded however
// long the message.
inline constexpr size_t kWindowSegments = 4;
// Segment size of the pipelined exchanges (trees, halving and doubling, the broadcast chain):
// big enough that per-message costs vanish, small enough that a receiver reduces one segment
// while the next is in flight. The ring has its own (ring.h, Note [Ring segment size]): it
// reduces on receive, so it gains nothing from smaller segments.
inline constexpr size_t kPipelineSegmentBytes = 256 * 1024;

// Segment k of round `round` (Note [Message steps]).
inline Step step_id(uint64_t round, size_t segment) {
  return Step(static_cast<uint32_t>(round), static_cast<uint32_t>(segment));
}

// Elements per segment so that a segment holds about `bytes`.
inline size_t segment_elems(size_t bytes, size_t esize) {
  return std::max<size_t>(1, bytes / esize);
}

// Elements per segment of the pipelined exchanges, and the landing window one stream needs.
inline size_t pipeline_segment(size_t esize) {
  return segment_elems(kPipelineSegmentBytes, esize);
}
inline size_t window_bytes(size_t seg, size_t esize) {
  return kWindowSegments * seg * esize;
}

// Segments of `seg` elements covering `count`. Unlike segment_count() in chunking.h this is 0
// for an empty transfer: both sides know the count, so both skip the message alike.
inline size_t segments_in(size_t count, size_t seg) {
  return (count + seg - 1) / seg;
}

// Elements of segment k of a transfer of `count`.
inline Range segment_of(size_t count, size_t seg, size_t k) {
  const size_t begin = k * seg;
  return Range{begin, std::min(seg, count - begin)};
}

// Posts `count` elements at `data` to `peer` as segments of `seg` elements; the requests are
// appended to `requests`, and `data` must stay unchanged until they complete.
void post_sends(Context& ctx, int peer, uint64_t round, const void* data, size_t count,
                size_t esize, size_t seg, std::vector<std::unique_ptr<Request>>& requests);
// The matching receives, straight into their destination.
void post_recvs(Context& ctx, int peer, uint64_t round, void* data, size_t count, size_t esize,
                size_t seg, std::vector<std::unique_ptr<Request>>& requests);

// Receives the segments of one post_sends() stream in order, landing them in a ring of
// kWindowSegments slots (`slots` holds kWindowSegments * seg * esize bytes).
class SegmentReceiver {
 public:
  SegmentReceiver(Context& ctx, int peer, uint64_t round, size_t count, size_t esize, size_t seg,
                  uint8_t* slots);
  // Waits for the next segment and returns where it landed. The pointer stays valid until the
  // following call, which reuses the slot.
  const uint8_t* next();

 private:
  void post(size_t k);

  Context* ctx_;
  int peer_;
  uint64_t round_;
  size_t count_, esize_, seg_, segments_;
  uint8_t* slots_;
  size_t next_ = 0;
  std::vector<std::unique_ptr<Request>> pending_;  // by slot
};

// Settles the reduce-scatters that need no message: an empty block, or a world of one (whose
// block is its input). Returns true when it did.
bool reduce_scatter_without_peers(Context& ctx, const void* in, void* out, size_t block_bytes);

// Receives `count` elements that `peer` sent with post_sends(round, seg) and writes
// out[i] = op(mine[i], received[i]) segment by segment as they land. `mine` may alias `out`;
// `window` holds kWindowSegments * seg * dtype_size(dtype) bytes.
void recv_combine(Context& ctx, int peer, uint64_t round, void* out, const void* mine, size_t count,
                  DType dtype, ReduceOp op, size_t seg, uint8_t* window);

// Note [Power-of-two fold]
// Recursive halving and doubling need a power-of-two number of ranks. With n = p + rem, p the
// largest power of two <= n, the first 2*rem ranks pair up: each even one hands its data to
// the odd one above it and sits out; the odd ones and the ranks from 2*rem on are the p
// participants, numbered 0..p-1 in rank order. Participant i < rem thus stands for ranks 2i
// and 2i+1, participant i >= rem for rank i + rem. At the end each rank that sat out gets its
// result from its partner. The fold costs two extra latency terms and N extra bytes on the
// 2*rem folded ranks, but keeps every chunk's reduction in one place.
struct Fold {
  int n = 1;
  int p = 1;
  int rem = 0;

  explicit Fold(int size);
  // The participant number of `rank`, or -1 for a rank that sits out.
  int participant(int rank) const;
  // The rank participant i runs on.
  int rank_of(int participant) const {
    return participant < rem ? 2 * participant + 1 : participant + rem;
  }
  // The lowest rank participant i stands for; first_rank(p) == n, so [first_rank(i),
  // first_rank(i+1)) are the ranks of participant i.
  int first_rank(int participant) const {
    return participant < rem ? 2 * participant : participant + rem;
  }
};

// Recursive halving among the fold's participants (Note [Power-of-two fold]): in the step with
// distance d = p/2, p/4, ..., 1, participant i sends the half of its current range that
// participant i^d keeps and combines the half it keeps (the lower one when bit d of i is
// clear) with what i^d sends. `bounds` (p+1 element offsets) cut the data into participants'
// pieces; on return `work` holds at [bounds[i], bounds[i+1]) op over all participants' data
// there, computed on participant i alone. The first step reads `src` (which may be `work`),
// later ones `work`. Segments are pipeline_segment() long; `window` holds window_bytes() of
// them. Uses rounds first_round .. first_round + log2(p) - 1.
void recursive_halving(Context& ctx, const Fold& fold, const std::vector<size_t>& bounds,
                       const uint8_t* src, uint8_t* work, DType dtype, ReduceOp op, uint8_t* window,
                       uint64_t first_round);

}  // namespace cohort::algo
