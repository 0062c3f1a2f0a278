// Direct reduce: every rank sends its buffer to the root, which combines the n inputs in rank
// order (so the result matches allreduce_direct bit for bit). One round; the root receives
// (n-1) N bytes.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void reduce_direct(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root) {
  const int n = ctx.size();
  if (n == 1) return;
  const size_t bytes = count * dtype_size(dtype);
  if (ctx.rank() != root) {
    ctx.send(root, 0, data, bytes);
    return;
  }
  uint8_t* slots = ctx.scratch(bytes * static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> recvs;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != root) recvs.push_back(ctx.irecv(peer, 0, slots + peer * bytes, bytes));
  }
  if (bytes > 0) kernels::copy(slots + root * bytes, data, bytes);
  wait_all(recvs);
  for (int r = 1; r < n; ++r) {
    kernels::reduce_into(slots, slots + r * bytes, count, dtype, kernels::combine_op(op));
  }
  if (bytes > 0) kernels::copy(data, slots, bytes);
}

}  // namespace cohort::algo
