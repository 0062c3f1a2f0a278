// Ring shift of registered inputs among the ranks of one node (algorithms/registered_view.h):
//   ready round;
//   every rank copies its predecessor's input straight into its own output (which the group
//     checked does not overlap its input, the only buffer of this rank a peer reads);
//   done round: nobody reads this rank's input any more.
// Each rank reads one input once and writes its output once.

#include "algorithms/algorithms.h"
#include "algorithms/registered_view.h"
#include "kernels/copy_kernel.h"

namespace cohort::algo {

void ring_shift_registered(Context&, RegisteredView& input, uint8_t* out, size_t bytes,
                           int predecessor) {
  constexpr const char* kWhat = "ring_shift over registered shared memory";
  input.post_ready(kWhat);
  kernels::copy(out, input.buffer(predecessor), bytes);
  input.post_done(kWhat);
}

}  // namespace cohort::algo
