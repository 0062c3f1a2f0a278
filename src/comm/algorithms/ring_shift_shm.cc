// Shared-memory ring shift for the ranks of one node: per round every rank copies a slot-sized
// chunk of its input into its slot, and (all posted) copies its predecessor's chunk out of the
// predecessor's slot. One post-and-wait per chunk, two copies of each byte; Note [Slot reuse]
// in shm_rounds.h says why a rank may refill its slot two rounds on. A registered input is read
// in place instead (ring_shift_registered.cc): one copy.
#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "cohort/core/check.h"
#include "kernels/copy_kernel.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

namespace {

// The window's index of the group rank before this one on the ring.
int predecessor_in_window(const Context& ctx, const ShmWindow& window) {
  const int predecessor = (ctx.rank() + ctx.size() - 1) % ctx.size();
  for (int r = 0; r < window.size(); ++r) {
    if (window.group_rank(r) == predecessor) return r;
  }
  COHORT_INTERNAL_ASSERT(false, "rank ", predecessor, " is not in this node's window");
  return 0;
}

}  // namespace

void ring_shift_shm(Context& ctx, const void* in, void* out, size_t bytes) {
  ShmWindow& window = *ctx.shm();
  const int predecessor = predecessor_in_window(ctx, window);
  RegisteredView view(ctx, in, bytes);
  if (view.registered()) {
    ring_shift_registered(ctx, view, static_cast<uint8_t*>(out), bytes, predecessor);
    return;
  }
  const auto* source = static_cast<const uint8_t*>(in);
  auto* target = static_cast<uint8_t*>(out);
  for (size_t offset = 0; offset < bytes; offset += window.slot_bytes()) {
    const size_t length = std::min(window.slot_bytes(), bytes - offset);
    const uint64_t round = window.next_round();
    kernels::copy(window.slot(window.rank(), round), source + offset, length);
    ctx.post_shm_round(round, "ring_shift over shared memory");
    kernels::copy(target + offset, window.slot(predecessor, round), length);
  }
}

}  // namespace cohort::algo
