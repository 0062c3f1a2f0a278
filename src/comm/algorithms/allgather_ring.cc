// Ring all-gather.
//
// Steps, n ranks, blocks of B bytes: for s in 0..n-2, rank r sends block (r - s) mod n to r+1
// and receives block (r - s - 1) mod n from r-1, straight into its place in the output. All
// receives are posted up front and every block moves in segments of kPipelineSegmentBytes,
// each forwarded as soon as it lands, so the steps overlap.
// Bytes sent per rank: (n-1) B, the minimum; n-1 latency terms. Only neighbours talk, one
// stream each way, which is what large messages want; small ones lose to Bruck
// (allgather_doubling.cc, ceil(log2 n) terms) or the direct exchange (one term).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"

namespace cohort::algo {

void allgather_ring(Context& ctx, const void* in, void* out, size_t bytes) {
  const int n = ctx.size();
  const int me = ctx.rank();
  auto* blocks = static_cast<uint8_t*>(out);
  if (bytes > 0 && blocks + me * bytes != in) std::memcpy(blocks + me * bytes, in, bytes);
  if (n == 1 || bytes == 0) return;
  const int right = (me + 1) % n;
  const int left = (me - 1 + n) % n;
  auto block = [&](int s) { return blocks + static_cast<size_t>((me - s + 2 * n) % n) * bytes; };
  const size_t seg = kPipelineSegmentBytes;
  const size_t segments = segments_in(bytes, seg);

  // Step s receives block (me - s - 1) under round s; it is forwarded under round s + 1.
  std::vector<std::unique_ptr<Request>> recvs;
  for (int s = 0; s < n - 1; ++s) post_recvs(ctx, left, s, block(s + 1), bytes, 1, seg, recvs);
  std::vector<std::unique_ptr<Request>> sends;
  post_sends(ctx, right, 0, block(0), bytes, 1, seg, sends);
  for (int s = 1; s < n - 1; ++s) {
    for (size_t k = 0; k < segments; ++k) {
      recvs[(s - 1) * segments + k]->wait();
      const Range piece = segment_of(bytes, seg, k);
      sends.push_back(ctx.isend(right, step_id(s, k), block(s) + piece.begin, piece.count));
    }
  }
  wait_all(recvs);
  wait_all(sends);
}

}  // namespace cohort::algo
