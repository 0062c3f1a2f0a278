// Broadcast of a registered buffer among the ranks of one node (algorithms/registered_view.h):
//   ready round;
//   every rank but the root copies the root's buffer into its own;
//   done round: nobody reads the root's buffer any more.
// The root writes nothing; each other rank reads the buffer once, straight from the root's.

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void broadcast_registered(Context&, RegisteredView& view, uint8_t* data, size_t bytes, int root) {
  constexpr const char* kWhat = "broadcast over registered shared memory";
  view.post_ready(kWhat);
  if (view.rank() != root) kernels::copy(data, view.buffer(root), bytes);
  view.post_done(kWhat);
}

}  // namespace cohort::algo
