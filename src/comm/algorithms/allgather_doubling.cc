// Bruck all-gather, for any number of ranks.
//
// Steps, n ranks, blocks of B bytes: rank r keeps a staging copy whose slot i will hold the
// block of rank (r + i) mod n; slot 0 starts as its own block. In round k = 0, 1, ...,
// ceil(log2 n) - 1, with d = 2^k, rank r sends its first min(d, n - d) slots to rank r - d and
// receives as many into slots d, d+1, ... from rank r + d (whose slot j is block r + d + j).
// A final rotation copies slot i to output block (r + i) mod n.
// Bytes sent per rank: (n-1) B, like the ring, in ceil(log2 n) latency terms instead of n-1;
// the staging copy costs n B of scratch and one local copy. Suits small and mid messages.

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void allgather_doubling(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  const int me = ctx.rank();
  auto* blocks = static_cast<uint8_t*>(out);
  if (bytes == 0) return;
  if (n == 1) {
    if (out != in) kernels::copy(out, in, bytes);
    return;
  }
  uint8_t* staging = ctx.scratch(static_cast<size_t>(n) * bytes);
  kernels::copy(staging, in, bytes);
  const size_t seg = kPipelineSegmentBytes;
  uint64_t round = 0;
  for (int d = 1; d < n; d *= 2, ++round) {
    const size_t moved = static_cast<size_t>(std::min(d, n - d)) * bytes;
    std::vector<std::unique_ptr<Request>> requests;
    post_recvs(ctx, (me + d) % n, round, staging + d * bytes, moved, 1, seg, requests);
    post_sends(ctx, (me - d + n) % n, round, staging, moved, 1, seg, requests);
    wait_all(requests);
  }
  // Rotation: slot i is the block of rank (me + i) mod n.
  const size_t head = static_cast<size_t>(n - me) * bytes;  // slots 0 .. n-me-1: ranks me..n-1
  kernels::copy(blocks + me * bytes, staging, head);
  kernels::copy(blocks, staging + head, static_cast<size_t>(me) * bytes);
}

}  // namespace cohort::algo
