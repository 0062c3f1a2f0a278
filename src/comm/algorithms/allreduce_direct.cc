// Direct allreduce, for tiny messages: one round.
//
// Steps: every rank sends its whole buffer to every other rank and receives theirs; each rank
// then combines all n inputs in rank order 0, 1, ..., n-1, so every rank computes the same
// bitwise result. Bytes sent per rank: (n-1) N; one latency term. Wins when N is so small that
// latency dominates (a few KiB), loses badly beyond.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void allreduce_direct(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const size_t bytes = count * dtype_size(dtype);
  const int me = ctx.rank();
  // Slot r of scratch holds rank r's input (our own slot holds a copy of data).
  uint8_t* slots = ctx.scratch(bytes * static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> requests;
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.irecv(peer, 0, slots + peer * bytes, bytes));
  }
  for (int peer = 0; peer < n; ++peer) {
    if (peer != me) requests.push_back(ctx.isend(peer, 0, data, bytes));
  }
  kernels::copy(slots + me * bytes, data, bytes);
  wait_all(requests);
  for (int r = 1; r < n; ++r) {
    kernels::reduce_into(slots, slots + r * bytes, count, dtype, kernels::combine_op(op));
  }
  kernels::copy(data, slots, bytes);
  if (op == ReduceOp::kAvg) kernels::divide(data, count, dtype, n);
}

}  // namespace cohort::algo
