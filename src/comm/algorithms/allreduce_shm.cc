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
//
// Small messages take one round instead of two: every rank copies its whole buffer into its
// slot and (all posted) reduces all n copies itself, in rank order so that every rank computes
// the same bytes. That costs (n-1) buffers of reduction per rank but saves a hand-off, which is
// most of the time of a few KiB. Registered buffers do not take it: at 4 KiB and 2 ranks their
// two rounds in place measured faster than one round through the slots (medians of 5 runs on a
// busy 2-core Xeon: 1.1 us against 1.5 us).

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "algorithms/shm_rounds.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

namespace {

constexpr size_t kOneRoundBytes = 16 * 1024;  // of reduction per rank: below a hand-off's cost

void allreduce_shm_one_round(Context& ctx, uint8_t* data, size_t count, DType dtype, ReduceOp op) {
  ShmWindow& window = *ctx.shm();
  const size_t bytes = count * dtype_size(dtype);
  const uint64_t round = window.next_round();
  kernels::copy(window.slot(window.rank(), round), data, bytes);
  ctx.post_shm_round(round, "allreduce over shared memory");
  // Straight into `data`: its own copy is in the slot, so nothing read is overwritten.
  const ReduceOp combine = kernels::combine_op(op);
  kernels::reduce_pair(data, window.slot(0, round), window.slot(1, round), count, dtype, combine);
  for (int r = 2; r < window.size(); ++r) {
    kernels::reduce_into(data, window.slot(r, round), count, dtype, combine);
  }
  if (op == ReduceOp::kAvg) kernels::divide(data, count, dtype, window.size());
}

}  // namespace

void allreduce_shm(Context& ctx, void* data, size_t count, DType dtype, ReduceOp op) {
  const int n = ctx.shm()->size();
  if (n == 1 || count == 0) return;
  auto* bytes = static_cast<uint8_t*>(data);
  RegisteredView view(ctx, data, count * dtype_size(dtype));
  if (view.registered()) {
    allreduce_registered(ctx, view, bytes, count, dtype, op);
    return;
  }
  if (count * dtype_size(dtype) * static_cast<size_t>(n - 1) <= kOneRoundBytes) {
    allreduce_shm_one_round(ctx, bytes, count, dtype, op);
    return;
  }
  ShmRounds rounds(ctx, even_pieces(count, n), dtype_size(dtype), "allreduce over shared memory");
  uint8_t* own = bytes + rounds.part(ctx.shm()->rank(), 0).begin * dtype_size(dtype);
  const int divisor = op == ReduceOp::kAvg ? n : 1;
  for (size_t j = 0; j < rounds.rounds(); ++j) {
    rounds.reduce_scatter(j, bytes, own, dtype, op, divisor);
    rounds.all_gather(j, own, bytes);
  }
}

}  // namespace cohort::algo
