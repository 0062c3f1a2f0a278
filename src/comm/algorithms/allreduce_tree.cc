// Double-binary-tree allreduce: each half of the data is reduced up one binary tree to its root
// and broadcast back down the same tree, in pipelined segments.
//
// Trees, n ranks: tree 0 lays the ranks out as a heap (position q has children 2q+1 and 2q+2,
// root rank 0); tree 1 is the same heap over the ranks in reverse order (root rank n-1). The
// inner nodes of a heap are its first floor(n/2) positions, so every rank is an inner node in
// at most one tree and a leaf in the other, and the two trees share the load.
// Steps, N bytes, S segments of kTreeSegmentBytes per half:
//   reduce: for each segment, a node waits for that segment from its children, combines them
//     into its own data (own, then left, then right child) and sends the result to its parent.
//   broadcast: the root's segment is final; every node receives it from its parent into its
//     data and forwards it to its children.
// Both trees run interleaved, segment by segment, so a half pays the tree depth in segments,
// not in whole messages: about 2 (log2 n + S) segment times.
// Bytes sent per rank: N/2 up and none down in the tree where it is a leaf, N/2 up and N down
// where it is an inner node: at most 2N (the ring: 2 (n-1)/n N); 2 log2 n latency terms.
// Only the roots compute final values, and everyone else receives copies of them, so all ranks
// end with bitwise identical results.
#include <array>

#include "algorithms/algorithms.h"
#include "algorithms/primitives.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

namespace {

constexpr size_t kTreeSegmentBytes = 128 * 1024;
constexpr uint64_t kReduceRound = 0;     // + tree
constexpr uint64_t kBroadcastRound = 2;  // + tree

// One node's view of one of the two trees, over one half of the data.
struct TreeNode {
  int parent = -1;            // rank, -1 at the root
  std::vector<int> children;  // ranks, left first
  Range half;                 // the elements this tree carries
  size_t segments = 0;
};

TreeNode tree_node(int tree, int rank, int n, size_t count, size_t seg) {
  auto rank_at = [&](int position) { return tree == 0 ? position : n - 1 - position; };
  const int position = tree == 0 ? rank : n - 1 - rank;
  TreeNode node;
  if (position > 0) node.parent = rank_at((position - 1) / 2);
  for (int child = 2 * position + 1; child <= 2 * position + 2 && child < n; ++child) {
    node.children.push_back(rank_at(child));
  }
  node.half = chunk_range(count, 2, static_cast<size_t>(tree));
  node.segments = segments_in(node.half.count, seg);
  return node;
}

// Both trees over one rank's data, run as two pipelined phases.
struct DoubleTree {
  Context& ctx;
  uint8_t* data;
  DType dtype;
  ReduceOp op;
  size_t esize;
  size_t seg;
  std::array<TreeNode, 2> trees;

  size_t most_segments() const { return std::max(trees[0].segments, trees[1].segments); }
  uint8_t* segment_data(int t, size_t k) const {
    return data + (trees[t].half.begin + segment_of(trees[t].half.count, seg, k).begin) * esize;
  }
  size_t segment_bytes(int t, size_t k) const {
    return segment_of(trees[t].half.count, seg, k).count * esize;
  }

  // Segment by segment, both trees interleaved: combine the children's segment into ours
  // (left, then right) and pass it to the parent.
  void reduce_up() {
    const size_t streams = trees[0].children.size() + trees[1].children.size();
    uint8_t* windows = ctx.scratch(streams * window_bytes(seg, esize));
    std::array<std::vector<SegmentReceiver>, 2> from_children;
    for (int t = 0; t < 2; ++t) {
      for (int child : trees[t].children) {
        from_children[t].emplace_back(ctx, child, kReduceRound + t, trees[t].half.count, esize, seg,
                                      windows);
        windows += window_bytes(seg, esize);
      }
    }
    std::vector<std::unique_ptr<Request>> sends;
    for (size_t k = 0; k < most_segments(); ++k) {
      for (int t = 0; t < 2; ++t) {
        if (k >= trees[t].segments) continue;
        uint8_t* mine = segment_data(t, k);
        const size_t count = segment_bytes(t, k) / esize;
        for (auto& child : from_children[t]) {
          kernels::reduce_into(mine, child.next(), count, dtype, op);
        }
        if (trees[t].parent >= 0) {
          sends.push_back(
              ctx.isend(trees[t].parent, step_id(kReduceRound + t, k), mine, segment_bytes(t, k)));
        }
      }
    }
    wait_all(sends);  // broadcast_down() overwrites what was sent up
  }

  // The roots hold the result; everyone else receives it and passes it on, segment by segment.
  void broadcast_down() {
    std::array<std::vector<std::unique_ptr<Request>>, 2> from_parent;
    for (int t = 0; t < 2; ++t) {
      if (trees[t].parent < 0) continue;
      post_recvs(ctx, trees[t].parent, kBroadcastRound + t, data + trees[t].half.begin * esize,
                 trees[t].half.count, esize, seg, from_parent[t]);
    }
    std::vector<std::unique_ptr<Request>> sends;
    for (size_t k = 0; k < most_segments(); ++k) {
      for (int t = 0; t < 2; ++t) {
        if (k >= trees[t].segments) continue;
        if (trees[t].parent >= 0) from_parent[t][k]->wait();
        for (int child : trees[t].children) {
          sends.push_back(ctx.isend(child, step_id(kBroadcastRound + t, k), segment_data(t, k),
                                    segment_bytes(t, k)));
        }
      }
    }
    wait_all(sends);
  }
};

}  // namespace

void allreduce_tree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const size_t esize = dtype_size(dtype);
  const size_t seg = segment_elems(kTreeSegmentBytes, esize);
  DoubleTree tree{
      ctx,
      static_cast<uint8_t*>(data),
      dtype,
      kernels::combine_op(op),
      esize,
      seg,
      {tree_node(0, ctx.rank(), n, count, seg), tree_node(1, ctx.rank(), n, count, seg)}};
  tree.reduce_up();
  tree.broadcast_down();
  if (op == ReduceOp::kAvg) kernels::divide(data, count, dtype, n);
}

}  // namespace cohort::algo
