// Shared-memory all-gather for the ranks of one node (algorithms/shm_rounds.h): per round,
// every rank copies its part of its own block into its slot and (all posted) copies the others'
// parts out of theirs. Each rank writes its block once and reads the (n-1) others once.
#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "algorithms/shm_rounds.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

void allgather_shm(Context& ctx, const void* in, void* out, size_t bytes) {
  if (bytes == 0) return;
  RegisteredView input(ctx, in, bytes);
  if (input.registered()) {
    allgather_registered(ctx, input, static_cast<uint8_t*>(out), bytes);
    return;
  }
  ShmRounds rounds(ctx, block_pieces(bytes, ctx.shm()->size()), 1,
                   "allgather over shared memory");
  for (size_t j = 0; j < rounds.rounds(); ++j) {
    rounds.all_gather(j, static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out));
  }
}

}  // namespace cohort::algo
