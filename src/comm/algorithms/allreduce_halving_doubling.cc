// Rabenseifner allreduce: recursive-halving reduce-scatter, then recursive-doubling all-gather.
//
// Steps, n ranks, N bytes, p the largest power of two <= n, rem = n - p
// (Note [Power-of-two fold] in primitives.h):
//   fold (only when rem > 0): each even rank r < 2*rem sends its N bytes to r+1, which
//     combines them into its own; the even ranks then wait for the result.
//   reduce-scatter: the p participants cut the data into p chunks (chunk_range) and halve:
//     at distance d = p/2, ..., 1 a participant sends the half of its current range that its
//     partner i^d keeps and combines the other half with what the partner sends. After log2 p
//     steps participant i holds the full reduction of chunk i.
//   all-gather: at distance d = 1, 2, ..., p/2 partners swap the ranges they hold, doubling
//     them, until every participant holds every chunk.
//   unfold: each odd rank r < 2*rem sends the result to r-1.
// Bytes sent per participant: 2 (p-1)/p N (+ N on folded odd ranks; N on the even ones);
// 2 log2 p latency terms (+ 2 with a fold). Wins over the ring for mid sizes, where the ring's
// 2(n-1) latency terms dominate. Each chunk is reduced on one participant only and then copied,
// so all ranks end with bitwise identical results.
#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

namespace {

// Message rounds: fold, log2 p halving steps, log2 p doubling steps, unfold.
constexpr uint64_t kFoldRound = 0;
constexpr uint64_t kHalvingRound = 1;
constexpr uint64_t kDoublingRound = 64;
constexpr uint64_t kUnfoldRound = 128;

// Recursive doubling among the participants: on entry participant i holds chunk i, on return
// every chunk. Pure copies, straight into `data`.
void recursive_doubling(Context& ctx, const Fold& fold, const std::vector<size_t>& bounds,
                        uint8_t* data, size_t esize) {
  const int me = fold.participant(ctx.rank());
  const size_t seg = pipeline_segment(esize);
  uint64_t round = kDoublingRound;
  for (int d = 1; d < fold.p; d *= 2, ++round) {
    const int mine_lo = me & ~(d - 1);  // first chunk of the d chunks held now
    const int theirs_lo = mine_lo ^ d;
    const int peer = fold.rank_of(me ^ d);
    std::vector<std::unique_ptr<Request>> requests;
    post_recvs(ctx, peer, round, data + bounds[theirs_lo] * esize,
               bounds[theirs_lo + d] - bounds[theirs_lo], esize, seg, requests);
    post_sends(ctx, peer, round, data + bounds[mine_lo] * esize,
               bounds[mine_lo + d] - bounds[mine_lo], esize, seg, requests);
    wait_all(requests);
  }
}

}  // namespace

void allreduce_halving_doubling(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const bool average = op == ReduceOp::kAvg;
  op = kernels::combine_op(op);
  const int me = ctx.rank();
  const Fold fold(n);
  const size_t esize = dtype_size(dtype);
  const size_t seg = pipeline_segment(esize);
  auto* bytes = static_cast<uint8_t*>(data);
  uint8_t* window = ctx.scratch(window_bytes(seg, esize));
  std::vector<std::unique_ptr<Request>> sends;

  if (fold.participant(me) < 0) {  // sits out: hand over the data, get the result back
    post_sends(ctx, me + 1, kFoldRound, bytes, count, esize, seg, sends);
    wait_all(sends);  // before the result lands in the same buffer
    post_recvs(ctx, me + 1, kUnfoldRound, bytes, count, esize, seg, sends);
    wait_all(sends);
    return;
  }
  if (me < 2 * fold.rem) {
    recv_combine(ctx, me - 1, kFoldRound, bytes, bytes, count, dtype, op, seg, window);
  }

  std::vector<size_t> bounds(static_cast<size_t>(fold.p) + 1);
  for (int i = 0; i <= fold.p; ++i) {
    bounds[i] = chunk_range(count, static_cast<size_t>(fold.p), static_cast<size_t>(i)).begin;
  }
  recursive_halving(ctx, fold, bounds, bytes, bytes, dtype, op, window, kHalvingRound);
  if (average) {  // each participant divides the piece it owns before it is spread
    const int i = fold.participant(me);
    kernels::divide(bytes + bounds[i] * esize, bounds[i + 1] - bounds[i], dtype, n);
  }
  recursive_doubling(ctx, fold, bounds, bytes, esize);

  if (me < 2 * fold.rem) {
    post_sends(ctx, me - 1, kUnfoldRound, bytes, count, esize, seg, sends);
    wait_all(sends);
  }
}

}  // namespace cohort::algo
