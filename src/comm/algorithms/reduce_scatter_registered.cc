// Reduce-scatter of registered inputs of the ranks of one node (algorithms/registered_view.h):
//   ready round;
//   rank r combines block r of all n inputs, in rank order, into its output (which may be
//     block r of its own input);
//   done round: nobody reads this rank's input any more.
// Rank r reads block r of every input and writes only its own output: (1/n) of n inputs. An
// output that overlaps the rank's input anywhere else (the peers read those blocks until the
// done round) is written from scratch memory after it.

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "kernels/byte_ranges.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void reduce_scatter_registered(Context& ctx, RegisteredView& view, uint8_t* out, size_t count,
                               DType dtype, ReduceOp op) {
  constexpr const char* kWhat = "reduce_scatter over registered shared memory";
  const int n = view.size();
  const size_t block_bytes = count * dtype_size(dtype);
  const size_t own_block = static_cast<size_t>(view.rank()) * block_bytes;
  view.post_ready(kWhat);
  const uint8_t* in = view.buffer(view.rank());
  const bool out_in_peers_way =
      out != in + own_block &&
      kernels::ranges_overlap(out, block_bytes, in, static_cast<size_t>(n) * block_bytes);
  uint8_t* target = out_in_peers_way ? ctx.scratch(block_bytes) : out;
  std::vector<const uint8_t*> sources(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) sources[static_cast<size_t>(q)] = view.buffer(q) + own_block;
  reduce_in_rank_order(sources, target, count, dtype, op, ctx);
  view.post_done(kWhat);
  if (target != out) kernels::copy(out, target, block_bytes);
}

}  // namespace cohort::algo
