// Linear scatter: the root sends block r of its input to rank r. The root sends (n-1) B bytes.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void scatter_direct(Context& ctx, const void* in, void* out, size_t bytes, int root) {
  const int n = ctx.size();
  if (ctx.rank() != root) {
    ctx.recv(root, 0, out, bytes);
    return;
  }
  const auto* blocks = static_cast<const uint8_t*>(in);
  std::vector<std::unique_ptr<Request>> sends;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) sends.push_back(ctx.isend(peer, 0, blocks + peer * bytes, bytes));
  }
  if (bytes > 0 && blocks + root * bytes != out) kernels::copy(out, blocks + root * bytes, bytes);
  wait_all(sends);
}

}  // namespace cohort::algo
