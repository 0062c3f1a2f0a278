// Ring reduce-scatter.
//
// Steps, n ranks, input N = n * B bytes (blocks of B): for s in 0..n-2, rank r sends its
// partial sum of block (r - s - 1) mod n to r+1 (at s = 0 that is just its input block) and
// receives the partial sum of block (r - s - 2) mod n from r-1, combining it with its own input
// block. Block c starts at rank c+1 and gathers one contribution per hop, so after n-1 steps
// rank r holds the full reduction of block r, written straight into `out`.
// Bytes sent per rank: (n-1) B = (n-1)/n N, the minimum; n-1 latency terms. It is the first
// phase of the ring allreduce (ring_phase, ring.h), over partial sums kept in scratch because
// the input is read-only: before each step the block being received into starts as this rank's
// input block, and received segments are combined into it as they land. Large messages; small
// ones lose to halving (reduce_scatter_halving.cc) or the direct exchange.

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "algorithms/ring.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void reduce_scatter_ring(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                         ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const size_t block_bytes = count * dtype_size(dtype);
  if (reduce_scatter_without_peers(ctx, in, out, block_bytes)) return;
  const auto* input = static_cast<const uint8_t*>(in);
  auto input_block = [&](int index) {
    return input + static_cast<size_t>(ring_index(index, n)) * block_bytes;
  };
  // Two partial sums: the one being sent and the one being built; the last lands in `out`.
  uint8_t* partial[2];
  partial[0] = ctx.scratch(2 * block_bytes);
  partial[1] = partial[0] + block_bytes;
  const uint8_t* outgoing = input_block(me - 1);
  ring_phase(ctx, 0, dtype, kernels::combine_op(op), /*reduce=*/true, RingOrder::kStepByStep,
             [&](int s) {
               uint8_t* building = s == n - 2 ? static_cast<uint8_t*>(out) : partial[s % 2];
               const uint8_t* own = input_block(me - s - 2);
               if (building != own)
                 kernels::copy(building, own, block_bytes);  // in place: out is block me
               const RingStep step{outgoing, count, building, count};
               outgoing = building;
               return step;
             });
}

}  // namespace cohort::algo
