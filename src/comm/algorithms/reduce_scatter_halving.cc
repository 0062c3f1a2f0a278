// Recursive-halving reduce-scatter, for any world size.
//
// Steps, n ranks, input N = n * B bytes (B per output block), p the largest power of two
// <= n, rem = n - p (Note [Power-of-two fold] in primitives.h):
//   fold (only when rem > 0): each even rank r < 2*rem sends its whole input (N bytes) to r+1,
//     which combines it with its own. Participant i then stands for ranks 2i and 2i+1 (i < rem)
//     or for rank i + rem, and so owns the contiguous blocks of those ranks.
//   halving: at distance d = p/2, ..., 1 a participant sends the half of its current block
//     range that participant i^d owns and combines the other half with what i^d sends. After
//     log2 p steps participant i holds the full reduction of its own blocks.
//   unfold: participant i < rem sends block 2i to rank 2i and keeps block 2i+1.
// Bytes sent per participant: about (p-1)/p N (halves of halves; exact when rem = 0), plus B
// on the unfolding ones; the folded even ranks send N. log2 p latency terms (+ 2 with a fold).
// Suits small and mid messages, where the ring's n-1 latency terms dominate.

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

namespace {
constexpr uint64_t kFoldRound = 0;
constexpr uint64_t kHalvingRound = 1;
constexpr uint64_t kUnfoldRound = 64;
}  // namespace

void reduce_scatter_halving(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                            ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const size_t esize = dtype_size(dtype);
  const size_t block_bytes = count * esize;
  const auto* input = static_cast<const uint8_t*>(in);
  if (reduce_scatter_without_peers(ctx, in, out, block_bytes)) return;
  op = kernels::combine_op(op);
  const Fold fold(n);
  const size_t seg = pipeline_segment(esize);
  const size_t total = count * static_cast<size_t>(n);
  std::vector<std::unique_ptr<Request>> requests;

  if (fold.participant(me) < 0) {  // sits out: hand over the input, get block `me` back
    post_sends(ctx, me + 1, kFoldRound, input, total, esize, seg, requests);
    wait_all(requests);  // `out` may lie inside `in`
    post_recvs(ctx, me + 1, kUnfoldRound, out, count, esize, seg, requests);
    wait_all(requests);
    return;
  }

  // One scratch region: the running reduction of the whole input, then the landing window.
  uint8_t* work = ctx.scratch(total * esize + window_bytes(seg, esize));
  uint8_t* window = work + total * esize;
  const uint8_t* src = input;
  if (me < 2 * fold.rem) {
    recv_combine(ctx, me - 1, kFoldRound, work, input, total, dtype, op, seg, window);
    src = work;
  }
  std::vector<size_t> bounds(static_cast<size_t>(fold.p) + 1);
  for (int i = 0; i <= fold.p; ++i) {
    bounds[i] = static_cast<size_t>(fold.first_rank(i)) * count;
  }
  recursive_halving(ctx, fold, bounds, src, work, dtype, op, window, kHalvingRound);

  if (me < 2 * fold.rem) {  // holds blocks me-1 and me
    post_sends(ctx, me - 1, kUnfoldRound, work + (me - 1) * block_bytes, count, esize, seg,
               requests);
  }
  kernels::copy(out, work + me * block_bytes, block_bytes);
  wait_all(requests);
}

}  // namespace cohort::algo
