// TEMPORARY: variants not written yet; each throws. Removed as the algorithm files land.
#include "algorithms/algorithms.h"
#include "cohort/core/error.h"
namespace cohort::algo {
#define NI throw Error("not yet")
void allreduce_tree(Context&, void*, size_t, DType, ReduceOp) { NI; }
void allreduce_halving_doubling(Context&, void*, size_t, DType, ReduceOp) { NI; }
void broadcast_tree(Context&, void*, size_t, int) { NI; }
void broadcast_ring(Context&, void*, size_t, int) { NI; }
void reduce_tree(Context&, void*, size_t, DType, ReduceOp, int) { NI; }
void allgather_ring(Context&, const void*, void*, size_t) { NI; }
void allgather_doubling(Context&, const void*, void*, size_t) { NI; }
void reduce_scatter_ring(Context&, const void*, void*, size_t, DType, ReduceOp) { NI; }
void reduce_scatter_halving(Context&, const void*, void*, size_t, DType, ReduceOp) { NI; }
}
