// Direct reduce-scatter: rank r sends block j of its input to rank j, for every j != r, and
// combines the n copies of its own block in rank order. One round; (n-1)/n N bytes per rank.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void reduce_scatter_direct(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                           ReduceOp op) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const size_t bytes = count * dtype_size(dtype);
  const auto* input = static_cast<const uint8_t*>(in);
  uint8_t* slots = ctx.scratch(bytes * static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> requests;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.irecv(peer, 0, slots + peer * bytes, bytes));
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.isend(peer, 0, input + peer * bytes, bytes));
  }
  if (bytes > 0) kernels::copy(slots + me * bytes, input + me * bytes, bytes);
  wait_all(requests);
  for (int r = 1; r < n; ++r) {
    kernels::reduce_into(slots, slots + r * bytes, count, dtype, kernels::combine_op(op));
  }
  if (bytes > 0) kernels::copy(out, slots, bytes);
}

}  // namespace cohort::algo
