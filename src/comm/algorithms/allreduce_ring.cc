// Ring allreduce (Patarasuk & Yuan): a reduce-scatter ring followed by an all-gather ring.
//
// Steps, n ranks, N bytes, chunk c = N/n (chunks cut by chunk_range, so sizes differ by at
// most one element):
//   reduce-scatter: for s in 0..n-2, rank r sends chunk (r - s) mod n to r+1 and receives chunk
//     (r - s - 1) mod n from r-1, reducing it into its own copy. After n-1 steps rank r holds
//     the full reduction of chunk (r + 1) mod n.
//   all-gather: for s in 0..n-2, rank r sends chunk (r + 1 - s) mod n to r+1 and receives chunk
//     (r - s) mod n from r-1 straight into the result (no copy).
// kAvg: each rank divides its fully reduced chunk between the two phases, so the division
// costs one pass over 1/n of the data instead of the whole buffer on every rank.
// Bytes sent per rank: 2 (n-1)/n N, the lower bound for allreduce; 2(n-1) latency terms.
// Both phases are ring_phase (ring.h): segments of kRingSegmentBytes, received with
// irecv_reduce in the first phase, so that over TCP each piece is combined into the result as it
// arrives (no scratch copy of the chunk). Every rank reduces every chunk in the same order, so
// all ranks end with bitwise identical results.
#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/ring.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void allreduce_ring(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const size_t esize = dtype_size(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  const int r = ctx.rank();
  auto chunk = [&](int index) {
    return chunk_range(count, static_cast<size_t>(n), static_cast<size_t>(ring_index(index, n)));
  };
  // Step s sends chunk `to` and receives chunk `from` into its place in data.
  auto move = [&](int to, int from) {
    const Range out = chunk(to), in = chunk(from);
    return RingStep{bytes + out.begin * esize, out.count, bytes + in.begin * esize, in.count};
  };
  const ReduceOp combine = kernels::combine_op(op);
  ring_phase(ctx, 0, dtype, combine, /*reduce=*/true, RingOrder::kForward,
             [&](int s) { return move(r - s, r - s - 1); });
  if (op == ReduceOp::kAvg) {  // each rank divides the chunk it owns, 1/n of the data
    const Range owned = chunk(r + 1);
    kernels::divide(bytes + owned.begin * esize, owned.count, dtype, n);
  }
  ring_phase(ctx, static_cast<uint32_t>(n - 1), dtype, combine, /*reduce=*/false,
             RingOrder::kForward, [&](int s) { return move(r + 1 - s, r - s); });
}

}  // namespace cohort::algo
