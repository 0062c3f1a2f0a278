// Binomial-tree reduce to any root.
//
// Steps, n ranks, N bytes; ranks renumbered relative to the root (v = rank - root mod n):
//   a node v combines into its own data the data of its children v + 2^i, for every 2^i below
//   the lowest set bit of v (the root: every 2^i < n) with v + 2^i < n, smallest first, then
//   sends the result to its parent v - 2^j (2^j the lowest set bit of v). The data travels in
//   segments of kTreeSegmentBytes and each segment moves up as soon as it is complete, so the
//   levels of the tree work at once instead of one after another.
// Bytes sent per rank: N (0 by the root); the root receives ceil(log2 n) N and combines as
// much. ceil(log2 n) latency terms. Beats the direct reduce (the root receives (n-1) N and
// combines serially) once messages are more than a few KiB or n > 2.
// The root's data ends as the reduction; other ranks' data is clobbered with partial results.
#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

namespace {
constexpr size_t kTreeSegmentBytes = 128 * 1024;
}  // namespace

void reduce_tree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  op = kernels::combine_op(op);
  const int v = (ctx.rank() - root + n) % n;
  auto to_rank = [&](int relative) { return (relative + root) % n; };
  int reach = 1;  // lowest set bit of v: the distance to the parent and the children's bound
  while (reach < n && (v & reach) == 0) reach *= 2;
  std::vector<int> children;  // nearest (smallest subtree) first
  for (int d = 1; d < reach && v + d < n; d *= 2) children.push_back(to_rank(v + d));

  const size_t esize = dtype_size(dtype);
  const size_t seg = segment_elems(kTreeSegmentBytes, esize);
  uint8_t* windows = ctx.scratch(children.size() * window_bytes(seg, esize));
  std::vector<SegmentReceiver> from_children;
  from_children.reserve(children.size());
  for (size_t c = 0; c < children.size(); ++c) {
    from_children.emplace_back(ctx, children[c], 0, count, esize, seg,
                               windows + c * window_bytes(seg, esize));
  }
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<std::unique_ptr<Request>> sends;
  for (size_t k = 0, segments = segments_in(count, seg); k < segments; ++k) {
    const Range s = segment_of(count, seg, k);
    uint8_t* mine = bytes + s.begin * esize;
    for (auto& child : from_children) {
      kernels::reduce_into(mine, child.next(), s.count, dtype, op);
    }
    if (v != 0) {
      sends.push_back(ctx.isend(to_rank(v - reach), step_id(0, k), mine, s.count * esize));
    }
  }
  wait_all(sends);
}

}  // namespace cohort::algo
