// Pairwise all-to-all: rank r sends block j of its input to rank j and receives rank j's block
// r into out + j B. All n-1 exchanges are in flight at once; (n-1) B bytes each way per rank.

#include "algorithms/algorithms.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void all_to_all_direct(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  const int me = ctx.rank();
  const auto* input = static_cast<const uint8_t*>(in);
  auto* output = static_cast<uint8_t*>(out);
  std::vector<std::unique_ptr<Request>> requests;
  for (int k = 1; k < n; ++k) {
    const int from = (me - k + n) % n;
    requests.push_back(ctx.irecv(from, 0, output + from * bytes, bytes));
  }
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n;
    requests.push_back(ctx.isend(to, 0, input + to * bytes, bytes));
  }
  if (bytes > 0) kernels::copy(output + me * bytes, input + me * bytes, bytes);
  wait_all(requests);
}

}  // namespace cohort::algo
