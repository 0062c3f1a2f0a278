// Ring all-gather.
//
// Steps, n ranks, blocks of B bytes: for s in 0..n-2, rank r sends block (r - s) mod n to r+1
// and receives block (r - s - 1) mod n from r-1, straight into its place in the output: the
// second phase of the ring allreduce (ring_phase, ring.h).
// Bytes sent per rank: (n-1) B, the minimum; n-1 latency terms. Only neighbours talk, one
// stream each way, which is what large messages want; small ones lose to Bruck
// (allgather_doubling.cc, ceil(log2 n) terms) or the direct exchange (one term).

#include "algorithms/algorithms.h"
#include "algorithms/ring.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void allgather_ring(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  const int me = ctx.rank();
  auto* blocks = static_cast<uint8_t*>(out);
  if (bytes > 0 && blocks + me * bytes != in) kernels::copy(blocks + me * bytes, in, bytes);
  if (n == 1 || bytes == 0) return;
  auto block = [&](int index) {
    return blocks + static_cast<size_t>(ring_index(index, n)) * bytes;
  };
  ring_phase(ctx, 0, DType::kUInt8, ReduceOp::kSum, /*reduce=*/false, RingOrder::kForward,
             [&](int s) {
               return RingStep{block(me - s), bytes, block(me - s - 1), bytes};
             });
}

}  // namespace cohort::algo
