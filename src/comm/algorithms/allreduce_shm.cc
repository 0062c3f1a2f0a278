// Shared-memory allreduce for the ranks of one node (algorithms/shm_rounds.h).
//
// The buffer is cut into n pieces; rank r owns piece r. Per round j, on ranks of one host:
//   1. reduce-scatter round: every rank copies round j's parts of the pieces it does not own
//      into its slot; (all posted) rank r reduces its own part in place in its buffer, reading
//      the peers' copies straight out of their slots, and divides it for kAvg;
//   2. all-gather round: rank r copies its reduced part into its slot; (all posted) every rank
//      copies the others' reduced parts out of their slots.
// Each rank copies (n-1)/n of the buffer in and out and reduces 1/n of it: memory traffic,
// no system calls. Rounds are a slot (256 KiB) wide, so the data stays in cache between the two
// halves of a round.
#include "algorithms/algorithms.h"
#include "algorithms/shm_rounds.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

void allreduce_shm(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.shm()->size();
  if (n == 1 || count == 0) return;
  auto* bytes = static_cast<uint8_t*>(data);
  ShmRounds rounds(ctx, even_pieces(count, n), dtype_size(dtype), "allreduce over shared memory");
  uint8_t* own = bytes + rounds.part(ctx.shm()->rank(), 0).begin * dtype_size(dtype);
  const int divisor = op == ReduceOp::kAvg ? n : 1;
  for (size_t j = 0; j < rounds.rounds(); ++j) {
    rounds.reduce_scatter(j, bytes, own, dtype, op, divisor);
    rounds.all_gather(j, own, bytes);
  }
}

}  // namespace cohort::algo
