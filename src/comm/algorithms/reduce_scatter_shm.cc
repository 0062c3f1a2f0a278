// Shared-memory reduce-scatter for the ranks of one node (algorithms/shm_rounds.h): the
// blocks of `in` are the pieces; per round, every rank stages its parts of the other ranks'
// blocks in its slot, and (all posted) rank r reduces its part of block r into `out`, reading
// the peers' staged copies in place. Each rank copies (n-1)/n of `in` and reads as much.
#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "algorithms/shm_rounds.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

void reduce_scatter_shm(Context& ctx, const void* in, void* out, size_t count, DType dtype,
                        ReduceOp op) {
  const int n = ctx.shm()->size();
  if (count == 0) return;
  RegisteredView input(ctx, in, static_cast<size_t>(n) * count * dtype_size(dtype));
  if (input.registered()) {
    reduce_scatter_registered(ctx, input, static_cast<uint8_t*>(out), count, dtype, op);
    return;
  }
  ShmRounds rounds(ctx, block_pieces(count, n), dtype_size(dtype),
                   "reduce_scatter over shared memory");
  for (size_t j = 0; j < rounds.rounds(); ++j) {
    rounds.reduce_scatter(j, static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), dtype,
                          op, 1);
  }
}

}  // namespace cohort::algo
