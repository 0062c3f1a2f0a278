// Ring reduce-scatter.
//
// Steps, n ranks, input N = n * B bytes (blocks of B): for s in 0..n-2, rank r sends its
// partial sum of block (r - s - 1) mod n to r+1 (at s = 0 that is just its input block) and
// receives the partial sum of block (r - s - 2) mod n from r-1, combining it with its own input
// block. Block c starts at rank c+1 and gathers one contribution per hop, so after n-1 steps
// rank r holds the full reduction of block r, written straight into `out`.
// Bytes sent per rank: (n-1) B = (n-1)/n N, the minimum; n-1 latency terms. Received blocks
// are combined segment by segment as they land (segments of kPipelineSegmentBytes). Large
// messages; small ones lose to halving (reduce_scatter_halving.cc) or the direct exchange.

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void reduce_scatter_ring(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                         ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const size_t esize = dtype_size(dtype);
  const size_t block_bytes = count * esize;
  const auto* input = static_cast<const uint8_t*>(in);
  if (reduce_scatter_without_peers(ctx, in, out, block_bytes)) return;
  op = kernels::combine_op(op);
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  auto input_block = [&](int index) {
    return input + static_cast<size_t>((index + 2 * n) % n) * block_bytes;
  };
  const size_t seg = pipeline_segment(esize);

  // Scratch: two partial sums (the one being sent and the one being built), then the window.
  uint8_t* partial[2];
  partial[0] = ctx.scratch(2 * block_bytes + window_bytes(seg, esize));
  partial[1] = partial[0] + block_bytes;
  uint8_t* window = partial[1] + block_bytes;

  const uint8_t* outgoing = input_block(me - 1);
  for (int s = 0; s < n - 1; ++s) {
    uint8_t* result = s == n - 2 ? static_cast<uint8_t*>(out) : partial[s % 2];
    std::vector<std::unique_ptr<Request>> sends;
    post_sends(ctx, right, s, outgoing, count, esize, seg, sends);
    recv_combine(ctx, left, s, result, input_block(me - s - 2), count, dtype, op, seg, window);
    wait_all(sends);
    outgoing = result;
  }
}

}  // namespace cohort::algo
