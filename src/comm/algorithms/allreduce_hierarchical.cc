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
#include "algorithms/algorithms.h"
#include "algorithms/shm_rounds.h"
#include "cohort/core/check.h"
#include "kernels/reduce_kernels.h"
#include "group/topology.h"
#include "transport/rank_subset_transport.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

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

  ShmRounds within(ctx, pieces, esize, "hierarchical allreduce inside a node");
  for (size_t j = 0; j < within.rounds(); ++j) {
    within.reduce_scatter(j, bytes, own_bytes, dtype, op, 1);
  }
  RankSubsetTransport peers(ctx.transport(), topology.peers_across_nodes());
  Context between = ctx.over(peers);
  allreduce_with(across, between, own_bytes, own.count, dtype, kernels::combine_op(op));
  if (op == ReduceOp::kAvg) kernels::divide(own_bytes, own.count, dtype, ctx.size());
  for (size_t j = 0; j < within.rounds(); ++j) within.all_gather(j, own_bytes, bytes);
}

}  // namespace cohort::algo
