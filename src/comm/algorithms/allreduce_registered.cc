// Allreduce in place on registered buffers of the ranks of one node (algorithms/registered_view.h).
// The buffer is cut into n pieces (chunk_range); rank r owns piece r.
//   ready round;
//   rank r, a block (16 KiB) of its piece at a time: combines the block of all n buffers in
//     rank order (into its own buffer, or a scratch block when it cannot), divides it for
//     kAvg, and stores the result into the same block of every other rank's buffer; two
//     ranks do all of it in one pass over their two buffers (kernels::reduce_pair_into_both),
//     which in cache is about 1.5x faster than a combine followed by a copy;
//   done round: every piece of every buffer holds its result.
// Piece r of any buffer is read and written by rank r alone, so no rank waits inside. Each
// rank reads the buffer once (its piece of n buffers) and writes it once; no byte is staged,
// and every rank ends with the same bits (each piece is computed once).

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/registered_view.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

namespace {

// Rank `me`'s piece of n > 2 buffers, a block at a time.
void reduce_piece_in_blocks(Context& ctx, RegisteredView& view, uint8_t* data, Range own,
                            DType dtype, ReduceOp op) {
  const int n = view.size();
  const size_t esize = dtype_size(dtype);
  const size_t block = registered_block_elems(dtype);
  std::vector<const uint8_t*> sources(static_cast<size_t>(n));
  for (size_t begin = own.begin; begin < own.begin + own.count; begin += block) {
    const size_t length = std::min(block, own.begin + own.count - begin);
    const size_t at = begin * esize;
    for (int q = 0; q < n; ++q) sources[static_cast<size_t>(q)] = view.buffer(q) + at;
    uint8_t* result = data + at;
    reduce_in_rank_order(sources, result, length, dtype, op, ctx);
    if (op == ReduceOp::kAvg) kernels::divide(result, length, dtype, n);
    for (int q = 0; q < n; ++q) {
      if (q != view.rank()) kernels::copy(view.buffer(q) + at, result, length * esize);
    }
  }
}

}  // namespace

void allreduce_registered(Context& ctx, RegisteredView& view, uint8_t* data, size_t count,
                          DType dtype, ReduceOp op) {
  constexpr const char* kWhat = "allreduce over registered shared memory";
  const int n = view.size();
  view.post_ready(kWhat);
  const Range own = chunk_range(count, static_cast<size_t>(n), static_cast<size_t>(view.rank()));
  if (n == 2) {
    const size_t at = own.begin * dtype_size(dtype);
    kernels::reduce_pair_into_both(view.buffer(0) + at, view.buffer(1) + at, own.count, dtype, op,
                                   n);
  } else {
    reduce_piece_in_blocks(ctx, view, data, own, dtype, op);
  }
  view.post_done(kWhat);
}

}  // namespace cohort::algo
