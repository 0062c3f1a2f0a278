// Pipelined-chain broadcast from any root.
//
// Steps, n ranks, N bytes in S segments of kChainSegmentBytes: the ranks form a chain starting
// at the root (root, root+1, ..., root-1 mod n); each rank receives every segment from its
// predecessor and forwards it to its successor as soon as it has landed.
// Bytes sent per rank: N (0 by the last rank in the chain), the minimum for a broadcast; the
// last segment arrives after n - 1 + S - 1 segment times. Wins for large messages with n > 2;
// for small ones the n - 1 hops of latency lose to the binomial tree (broadcast_tree.cc).
#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"

namespace cohort::algo {

namespace {
constexpr size_t kChainSegmentBytes = 128 * 1024;
}  // namespace

void broadcast_ring(Context& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.size();
  if (n == 1 || bytes == 0) return;
  const int v = (ctx.rank() - root + n) % n;  // position in the chain
  const int prev = (ctx.rank() - 1 + n) % n;
  const int next = (ctx.rank() + 1) % n;
  const size_t seg = kChainSegmentBytes;
  std::vector<std::unique_ptr<Request>> from_prev;
  if (v != 0) post_recvs(ctx, prev, 0, data, bytes, 1, seg, from_prev);
  std::vector<std::unique_ptr<Request>> sends;
  const auto* out = static_cast<const uint8_t*>(data);
  for (size_t k = 0, segments = segments_in(bytes, seg); k < segments; ++k) {
    if (v != 0) from_prev[k]->wait();
    const Range s = segment_of(bytes, seg, k);
    if (v != n - 1) sends.push_back(ctx.isend(next, step_id(0, k), out + s.begin, s.count));
  }
  wait_all(sends);
}

}  // namespace cohort::algo
