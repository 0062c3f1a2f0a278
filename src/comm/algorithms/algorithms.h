// Every collective algorithm cohort has, one file each (docs/architecture.md). All are in place on
// `data` unless they take separate in/out pointers. Reductions combine with
// kernels::combine_op(op): kAvg combines as a sum; allreduce algorithms divide themselves,
// the Group divides the results of the others.
// Each file opens with the algorithm's steps and bytes on the wire; docs/algorithms.md
// collects them.
//
// Note [Reduction order]
// Floating-point sums depend on their order, so every algorithm combines each element in one
// fixed order (runs of the same call give the same bits), and every rank ends with the bits of
// one computation. Which order:
//   rank order, ((x0 + x1) + x2) + ..., for every element wherever it lies: direct (allreduce,
//     reduce, reduce-scatter), shared memory (one round, the staged rounds of ShmRounds, the
//     registered in-place paths) and the inside-node phases of hierarchical;
//   the ring: an element of chunk c is combined from rank c+1 around to rank c, so its order
//     depends on which chunk it falls in, i.e. on the buffer's length and n;
//   halving-doubling: a butterfly, (x0 + x4) + (x2 + x6) ... (after the fold of the ranks
//     beyond a power of two), the same for every element;
//   tree: each node combines its own, then its left and its right child's, per tree (so the two
//     halves of the buffer differ);
//   hierarchical: rank order inside each node, then the algorithm across nodes over the nodes'
//     sums.
// kAvg divides the finished sum by n everywhere. So on one host with shared memory (what
// Group::create picks there) an allreduce and a reduce-scatter give each element the same bits
// whatever the buffers' lengths and offsets: DDP's bucket allreduce, ZeRO's and FSDP's
// reduce-scatter produce identical gradients (the bitwise test in tests/torch/
// reduction_order_test.cc; docs/ddp.md, "Order of reductions"). Across nodes, or over TCP on one
// host, the ring's order follows the chunk and the strategies agree to rounding only.
#pragma once

#include <cstddef>

#include "algorithms/context.h"
#include "cohort/comm/options.h"

namespace cohort::algo {

class RegisteredView;  // algorithms/registered_view.h

// ---- allreduce: data[count] on every rank becomes op over all ranks. Each algorithm finishes
// kAvg itself (ring and halving-doubling divide only the piece each rank owns).
void allreduce_ring(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduce_tree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduce_halving_doubling(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
void allreduce_direct(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
// Needs ctx.shm() spanning the whole group (every rank on one node). Runs in place
// (allreduce_registered) when data is registered memory, else staged through the window.
void allreduce_shm(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op);
// Needs ctx.topology() with the same number of ranks on every node, and ctx.shm() when that
// number is above 1: shared-memory reduce-scatter in each node, allreduce of each piece across
// nodes with `across`, shared-memory all-gather.
void allreduce_hierarchical(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op,
                            Algorithm across);
// Runs one of the algorithms above (not kAuto or kEngine): the hierarchical allreduce's phase
// across nodes (a group's own calls go through NativeBackend's table). `across` is
// hierarchical's algorithm between nodes and is ignored by the others.
void allreduce_with(Algorithm algorithm, Context& ctx, void* data, size_t count, DType dtype,
                    ReduceOp op, Algorithm across = Algorithm::kRing);

// ---- broadcast: `bytes` of data on `root` are copied to every rank.
void broadcast_direct(Context& ctx, void* data, size_t bytes, int root);
void broadcast_tree(Context& ctx, void* data, size_t bytes, int root);  // binomial tree
void broadcast_ring(Context& ctx, void* data, size_t bytes, int root);  // pipelined chain
void broadcast_shm(Context& ctx, void* data, size_t bytes, int root);   // one node

// ---- reduce: op over all ranks lands in data on `root` (other ranks' data may be clobbered).
void reduce_direct(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root);
void reduce_tree(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op, int root);

// ---- allgather: every rank's `bytes` of input land at out + rank * bytes on every rank.
void allgather_direct(Context& ctx, const void* in, void* out, size_t bytes);
void allgather_ring(Context& ctx, const void* in, void* out, size_t bytes);
void allgather_doubling(Context& ctx, const void* in, void* out, size_t bytes);  // Bruck
void allgather_shm(Context& ctx, const void* in, void* out, size_t bytes);       // one node

// ---- reduce_scatter: in[size * count]; rank r gets op over ranks of block r in out[count].
void reduce_scatter_direct(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                           ReduceOp op);
void reduce_scatter_ring(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                         ReduceOp op);
void reduce_scatter_halving(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                            ReduceOp op);
void reduce_scatter_shm(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                        ReduceOp op);  // one node

// ---- rooted data movement and personalized exchange (linear: they are latency-bound or
// bounded by the root's link whatever the algorithm).
void gather_direct(Context& ctx, const void* in, void* out, size_t bytes, int root);
void scatter_direct(Context& ctx, const void* in, void* out, size_t bytes, int root);
void all_to_all_direct(Context& ctx, const void* in, void* out, size_t bytes_per_rank);

// ---- ring_shift: every rank's `bytes` of input land in the output of its successor
// (rank + 1 mod n); every rank receives its predecessor's.
void ring_shift_direct(Context& ctx, const void* in, void* out, size_t bytes);
void ring_shift_shm(Context& ctx, const void* in, void* out, size_t bytes);  // one node

// ---- in place on registered buffers of one node (algorithms/registered_view.h): what the
// shared-memory algorithms above run when the view of their buffer is registered.
void allreduce_registered(Context& ctx, RegisteredView& view, uint8_t* data, size_t count,
                          DType dtype, ReduceOp op);
void broadcast_registered(Context& ctx, RegisteredView& view, uint8_t* data, size_t bytes,
                          int root);
void allgather_registered(Context& ctx, RegisteredView& input, uint8_t* out, size_t bytes);
void reduce_scatter_registered(Context& ctx, RegisteredView& input, uint8_t* out, size_t count,
                               DType dtype, ReduceOp op);
// `predecessor`: the window's index of the rank before this one on the ring.
void ring_shift_registered(Context& ctx, RegisteredView& input, uint8_t* out, size_t bytes,
                           int predecessor);

// ---- barrier: dissemination, ceil(log2 n) rounds of empty messages.
void barrier_dissemination(Context& ctx);
void barrier_shm(Context& ctx);  // one node: a single round of posts

}  // namespace cohort::algo
