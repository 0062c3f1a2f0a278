// Shared-memory allreduce for ranks on one host (transport/shm/shm_window.h).
//
// The data goes through the window in chunks of slot_bytes, one round per chunk. In a round
// each chunk is cut into n pieces (chunk_range); rank r owns piece r:
//   1. copy-in: every rank copies the pieces the others own into its own slot;
//   2. (all posted) rank r reduces piece r in place in its own buffer, reading the peers'
//      copies straight from their slots, divides it for kAvg, and copies it to the result area;
//   3. (all reduced) every rank copies the other pieces out of the result area.
// Each piece is reduced by one rank only, so every rank ends with the same bytes. A rank's
// own piece never leaves its buffer except as a result. Chunks small enough to stay in cache
// keep the slots and result areas out of main memory; slots alternate between two buffers per
// rank so that round g + 1's copy-in can start while a slow rank still reads round g.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "chunking.h"
#include "reduce_kernels.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

void allreduce_shm(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  ShmWindow& window = *ctx.shm();
  const int n = window.size();
  const int me = window.rank();
  if (n == 1 || count == 0) return;
  const size_t esize = dtype_size(dtype);
  const size_t chunk_elems = std::max<size_t>(1, window.slot_bytes() / esize);
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t begin = 0; begin < count; begin += chunk_elems) {
    const size_t length = std::min(chunk_elems, count - begin);
    const uint64_t round = window.next_round();
    uint8_t* chunk = bytes + begin * esize;
    uint8_t* mine = window.slot(me, round);
    uint8_t* result = window.result(round);
    auto piece = [&](int owner) {
      return chunk_range(length, static_cast<size_t>(n), static_cast<size_t>(owner));
    };
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const Range r = piece(p);
      std::memcpy(mine + r.begin * esize, chunk + r.begin * esize, r.count * esize);
    }
    window.post_and_wait(round, ctx.deadline(), "allreduce over shared memory");
    const Range own = piece(me);
    uint8_t* own_bytes = chunk + own.begin * esize;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      kernels::reduce_into(own_bytes, window.slot(p, round) + own.begin * esize, own.count, dtype,
                           kernels::combine_op(op));
    }
    if (op == ReduceOp::kAvg) kernels::divide(own_bytes, own.count, dtype, n);
    std::memcpy(result + own.begin * esize, own_bytes, own.count * esize);
    window.reduced_and_wait(round, ctx.deadline(), "allreduce over shared memory");
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const Range r = piece(p);
      std::memcpy(chunk + r.begin * esize, result + r.begin * esize, r.count * esize);
    }
  }
}

}  // namespace cohort::algo
