// Direct broadcast: the root sends the buffer to each other rank; one round.
// Bytes sent by the root: (n-1) N; by others: 0. For small N or small n.
#include "algorithms/algorithms.h"

namespace cohort::algo {

void broadcast_direct(Context& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.size();
  if (n == 1) return;
  if (ctx.rank() != root) {
    ctx.recv(root, 0, data, bytes);
    return;
  }
  std::vector<std::unique_ptr<Request>> sends;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) sends.push_back(ctx.isend(peer, 0, data, bytes));
  }
  wait_all(sends);
}

}  // namespace cohort::algo
