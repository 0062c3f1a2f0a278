// Shared-memory barrier for the ranks of one node: one round in which every rank posts and
// waits for all the others' posts. No data moves; a rank leaves once every rank has arrived.
#include "algorithms/algorithms.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

// All ranks post an empty round: when the wait returns, every rank has arrived.
void barrier_shm(Context& ctx) {
  ShmWindow& window = *ctx.shm();
  ctx.post_shm_round(window.next_round(), "barrier over shared memory");
}

}  // namespace cohort::algo
