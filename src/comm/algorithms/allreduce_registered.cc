// Allreduce in place on registered buffers of the ranks of one node (algorithms/registered_view.h).
// The buffer is cut into n pieces (chunk_range); rank r owns piece r.
//   ready round;
//   rank r, a block (16 KiB) of its piece at a time: combines the block of all n buffers in
//     rank order (into its own buffer, or a scratch block when it cannot), divides it for
//     kAvg, and stores the result into the same block of every other rank's buffer;
//   done round: every piece of every buffer holds its result.
// Piece r of any buffer is read and written by rank r alone, so no rank waits inside. Each
// rank reads the buffer once (its piece of n buffers) and writes it once; no byte is staged,
// and every rank ends with the same bits (each piece is computed once).
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/chunking.h"
#include "algorithms/registered_view.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void allreduce_registered(Context& ctx, RegisteredView& view, uint8_t* data, size_t count,
                          DType dtype, ReduceOp op) {
  constexpr const char* kWhat = "allreduce over registered shared memory";
  const int n = view.size();
  const int me = view.rank();
  const size_t esize = dtype_size(dtype);
  view.post_ready(kWhat);
  const Range own = chunk_range(count, static_cast<size_t>(n), static_cast<size_t>(me));
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
      if (q != me) std::memcpy(view.buffer(q) + at, result, length * esize);
    }
  }
  view.post_done(kWhat);
}

}  // namespace cohort::algo
