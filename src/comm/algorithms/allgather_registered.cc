// All-gather of registered inputs of the ranks of one node (algorithms/registered_view.h):
//   ready round;
//   every rank copies each rank's input straight into its block of its own output (its own
//     block too, unless the input already is that block);
//   done round: nobody reads this rank's input any more.
// Each rank reads the (n-1) other inputs once and writes its output once. An output that
// overlaps the rank's input other than as its own block (the peers read the input until the
// done round) is gathered in scratch memory and copied out after it.

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "kernels/byte_ranges.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void allgather_registered(Context& ctx, RegisteredView& view, uint8_t* out, size_t bytes) {
  constexpr const char* kWhat = "allgather over registered shared memory";
  const size_t total = static_cast<size_t>(view.size()) * bytes;
  view.post_ready(kWhat);
  const uint8_t* in = view.buffer(view.rank());
  const bool out_in_peers_way = in != out + static_cast<size_t>(view.rank()) * bytes &&
                                kernels::ranges_overlap(out, total, in, bytes);
  uint8_t* target = out_in_peers_way ? ctx.scratch(total) : out;
  for (int q = 0; q < view.size(); ++q) {
    uint8_t* block = target + static_cast<size_t>(q) * bytes;
    if (block != view.buffer(q)) kernels::copy(block, view.buffer(q), bytes);
  }
  view.post_done(kWhat);
  if (target != out) kernels::copy(out, target, total);
}

}  // namespace cohort::algo
