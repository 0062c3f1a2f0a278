// Binomial-tree broadcast from any root.
//
// Steps, n ranks, N bytes; ranks are renumbered relative to the root (v = rank - root mod n):
//   a non-root v receives from v - 2^j, where 2^j is the lowest set bit of v, then forwards to
//   v + 2^i for every 2^i < 2^j (the root: every 2^i < n) with v + 2^i < n, largest subtree
//   first. The data travels in segments of kTreeSegmentBytes, so a node forwards the first
//   segment while later ones are still arriving.
// Bytes sent: ceil(log2 n) N by the root, fewer by inner nodes, 0 by leaves; every non-root
// receives N once. ceil(log2 n) latency terms. Suits small and mid messages; for large ones the
// root's ceil(log2 n) N bound loses to the pipelined chain (broadcast_ring.cc), which sends N.
#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"

namespace cohort::algo {

namespace {
constexpr size_t kTreeSegmentBytes = 128 * 1024;
}  // namespace

void broadcast_tree(Context& ctx, void* data, size_t bytes, int root) {
  const int n = ctx.size();
  if (n == 1 || bytes == 0) return;
  const int v = (ctx.rank() - root + n) % n;
  auto to_rank = [&](int relative) { return (relative + root) % n; };
  // Lowest set bit of v: the distance to the parent, and the bound on the children's.
  int reach = 1;
  while (reach < n && (v & reach) == 0) reach *= 2;
  std::vector<int> children;  // largest subtree first
  for (int d = reach / 2; d >= 1; d /= 2) {
    if (v + d < n) children.push_back(to_rank(v + d));
  }

  const size_t seg = kTreeSegmentBytes;
  std::vector<std::unique_ptr<Request>> from_parent;
  if (v != 0) post_recvs(ctx, to_rank(v - reach), 0, data, bytes, 1, seg, from_parent);
  std::vector<std::unique_ptr<Request>> sends;
  const auto* out = static_cast<const uint8_t*>(data);
  for (size_t k = 0, segments = segments_in(bytes, seg); k < segments; ++k) {
    if (v != 0) from_parent[k]->wait();
    const Range s = segment_of(bytes, seg, k);
    for (int child : children) {
      sends.push_back(ctx.isend(child, step_id(0, k), out + s.begin, s.count));
    }
  }
  wait_all(sends);
}

}  // namespace cohort::algo
