// Hierarchical allreduce for L ranks on each of M nodes (N = L * M), with shared memory inside
// a node and the network between nodes:
//   1. inside each node, a shared-memory reduce-scatter: local rank l ends with piece l (1/L
//      of the buffer) summed over its node (algorithms/shm_rounds.h);
//   2. across nodes, the M ranks with local rank l allreduce piece l with a flat algorithm
//      (ring or halving-doubling) over the network, then divide by N for kAvg;
//   3. inside each node, a shared-memory all-gather of the L pieces.
// On the wire each rank sends 2(M-1)/M of its piece, so each node sends 2(M-1)/M of the
// buffer in all: the same as one rank per node, where a flat ring over N ranks puts
// 2(N-1)/N of the buffer through every node's link and pays 2(N-1) latencies instead of
// 2(M-1). With L = 1 it is the flat algorithm `across` over all ranks.
//
// On registered buffers (algorithms/registered_view.h) the phases inside a node work in place:
//   1. ready round; local rank l combines piece l of the L buffers in rank order into its own;
//   2. as above, on piece l of its own buffer;
//   3. local rank l stores its piece into piece l of every other local buffer; done round.
// Piece l of every local buffer is read and written by local rank l alone, so phase 3 needs
// no round before it. Nothing is staged; two rounds in all instead of two per slot.

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "algorithms/shm_rounds.h"
#include "cohort/core/check.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"
#include "topology/topology.h"
#include "transport/rank_subset_transport.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

namespace {

// Phase 2 on this rank's piece: the flat algorithm among the ranks of the same local rank.
void allreduce_across_nodes(Context& ctx, uint8_t* piece, size_t count, DType dtype, ReduceOp op,
                            Algorithm across) {
  const Topology& topology = *ctx.topology();
  RankSubsetTransport peers(ctx.transport(), topology.peers_across_nodes());
  Context between = ctx.over(peers);
  allreduce_with(across, between, piece, count, dtype, kernels::combine_op(op));
  if (op == ReduceOp::kAvg) kernels::divide(piece, count, dtype, ctx.size());
}

void allreduce_hierarchical_registered(Context& ctx, RegisteredView& view, uint8_t* data,
                                       const Range& own, DType dtype, ReduceOp op,
                                       Algorithm across) {
  constexpr const char* kWhat = "hierarchical allreduce inside a node (registered memory)";
  const size_t esize = dtype_size(dtype);
  const size_t at = own.begin * esize;
  view.post_ready(kWhat);
  std::vector<const uint8_t*> sources(static_cast<size_t>(view.size()));
  for (int q = 0; q < view.size(); ++q) sources[static_cast<size_t>(q)] = view.buffer(q) + at;
  reduce_in_rank_order(sources, data + at, own.count, dtype, kernels::combine_op(op), ctx);
  allreduce_across_nodes(ctx, data + at, own.count, dtype, op, across);
  for (int q = 0; q < view.size(); ++q) {
    if (q != view.rank()) kernels::copy(view.buffer(q) + at, data + at, own.count * esize);
  }
  view.post_done(kWhat);
}

}  // namespace

void allreduce_hierarchical(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op,
                            Algorithm across) {
  const Topology& topology = *ctx.topology();
  const int local_size = topology.uniform_local_size();
  COHORT_INTERNAL_ASSERT(local_size >= 1 && (local_size == 1 || ctx.shm() != nullptr),
                         "hierarchical allreduce needs equal nodes with shared memory");
  if (local_size == 1) {  // one rank per node: nothing to share inside a node
    allreduce_with(across, ctx, data, count, dtype, op);
    return;
  }
  if (count == 0) return;
  const size_t esize = dtype_size(dtype);
  auto* bytes = static_cast<uint8_t*>(data);
  const std::vector<Range> pieces = even_pieces(count, local_size);
  const Range own = pieces[static_cast<size_t>(topology.local_rank())];
  uint8_t* own_bytes = bytes + own.begin * esize;
  RegisteredView view(ctx, data, count * esize);
  if (view.registered()) {
    allreduce_hierarchical_registered(ctx, view, bytes, own, dtype, op, across);
    return;
  }

  ShmRounds within(ctx, pieces, esize, "hierarchical allreduce inside a node");
  for (size_t j = 0; j < within.rounds(); ++j) {
    within.reduce_scatter(j, bytes, own_bytes, dtype, op, 1);
  }
  allreduce_across_nodes(ctx, own_bytes, own.count, dtype, op, across);
  for (size_t j = 0; j < within.rounds(); ++j) within.all_gather(j, own_bytes, bytes);
}

}  // namespace cohort::algo
