// Linear gather: every rank sends its block to the root, which places block r at out + r B.
// The root receives (n-1) B bytes; every message is one latency term, all in flight at once.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void gather_direct(Context& ctx, const void* in, void* out, size_t bytes, int root) {
  const int n = ctx.size();
  if (ctx.rank() != root) {
    ctx.send(root, 0, in, bytes);
    return;
  }
  auto* blocks = static_cast<uint8_t*>(out);
  std::vector<std::unique_ptr<Request>> recvs;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) recvs.push_back(ctx.irecv(peer, 0, blocks + peer * bytes, bytes));
  }
  if (bytes > 0 && blocks + root * bytes != in) kernels::copy(blocks + root * bytes, in, bytes);
  wait_all(recvs);
}

}  // namespace cohort::algo
