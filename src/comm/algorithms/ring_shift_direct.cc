// Ring shift over point-to-point messages: each rank receives its predecessor's input while it
// sends its own to its successor, both in flight at once, so no rank waits on another's send
// to finish first. `bytes` each way per rank.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void ring_shift_direct(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  if (n == 1) {
    if (bytes > 0 && in != out) kernels::copy(out, in, bytes);
    return;
  }
  const int successor = (ctx.rank() + 1) % n;
  const int predecessor = (ctx.rank() + n - 1) % n;
  std::vector<std::unique_ptr<Request>> requests;
  requests.push_back(ctx.irecv(predecessor, 0, out, bytes));
  requests.push_back(ctx.isend(successor, 0, in, bytes));
  wait_all(requests);
}

}  // namespace cohort::algo
