// Direct all-gather: every rank sends its block to every other rank; one round.
// Bytes sent per rank: (n-1) B for blocks of B bytes (the same as the ring, in one latency term
// instead of n-1, but with n-1 concurrent streams per rank).

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void allgather_direct(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  const int me = ctx.rank();
  auto* blocks = static_cast<uint8_t*>(out);
  if (bytes > 0 && blocks + me * bytes != in) kernels::copy(blocks + me * bytes, in, bytes);
  if (n == 1) return;
  std::vector<std::unique_ptr<Request>> requests;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.irecv(peer, 0, blocks + peer * bytes, bytes));
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.isend(peer, 0, blocks + me * bytes, bytes));
  }
  wait_all(requests);
}

}  // namespace cohort::algo
