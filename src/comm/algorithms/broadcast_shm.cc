// Shared-memory broadcast for the ranks of one node: per round the root copies a slot-sized
// chunk into its slot, and (all posted) every other rank copies it out. One post-and-wait per
// chunk; Note [Slot reuse] in shm_rounds.h says why the root may refill the slot two rounds on.
#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "kernels/copy_kernel.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

void broadcast_shm(Context& ctx, void* data, size_t bytes, int root) {
  ShmWindow& window = *ctx.shm();
  auto* base = static_cast<uint8_t*>(data);
  RegisteredView view(ctx, data, bytes);
  if (view.registered()) {
    broadcast_registered(ctx, view, base, bytes, root);
    return;
  }
  for (size_t offset = 0; offset < bytes; offset += window.slot_bytes()) {
    const size_t length = std::min(window.slot_bytes(), bytes - offset);
    const uint64_t round = window.next_round();
    if (window.rank() == root) kernels::copy(window.slot(root, round), base + offset, length);
    ctx.post_shm_round(round, "broadcast over shared memory");
    if (window.rank() != root) kernels::copy(base + offset, window.slot(root, round), length);
  }
}

}  // namespace cohort::algo
