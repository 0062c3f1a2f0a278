// The ring, once: its phases (reduce-scatter, all-gather) are the same loop whatever buffers a
// collective keeps its blocks in, so allreduce_ring, reduce_scatter_ring and allgather_ring
// all run ring_phase and differ only in where each step's blocks are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "algorithms/context.h"

namespace cohort::algo {

// Note [Ring segment size]: a segment is a message, and every message costs fixed work on
// both sides besides its bytes: a frame through the transport's queues, a wake-up of the
// thread that waits for it, and over TCP a hand-off to the progress engine. Segments do not
// buy overlap in the ring (the transport reduces on receive, in cache-sized pieces, while the
// sends stream out), so they only need to be small enough to bound what a message that
// arrives before its receive is posted costs (it is buffered whole, then copied). At 2 ranks
// over TCP loopback on 2 cores, 1 MiB instead of 256 KiB cut the CPU time of a 64 MiB
// allreduce by about a fifth (75 to 57 ms) and raised busbw from about 1.6 to 2.0 GB/s; 2 and
// 4 MiB were no better, and one message per block was far worse (whole blocks buffered as
// unexpected messages).
inline constexpr size_t kRingSegmentBytes = 1024 * 1024;

// What one ring step moves: `send_count` elements at `send` go to the right neighbour while
// `recv_count` elements from the left neighbour land at `recv`, combined into what it holds
// (a reducing phase) or written over it.
struct RingStep {
  const void* send;
  size_t send_count;
  void* recv;
  size_t recv_count;
};

// How the steps of a phase follow each other.
//  - kStepByStep: step s + 1 starts when step s's sends and receives are done, and step(s + 1)
//    is asked only then (it may fill its receive buffer first: reduce_scatter_ring's partial
//    sums).
//  - kForward: what step s sends is what step s - 1 received (step(s).send == step(s-1).recv,
//    the same block), so every receive is posted up front and each segment is sent on as soon
//    as it has landed: the steps overlap, as in a pipeline. The receive buffers must hold no
//    data that a later step needs first (they are written as soon as the bytes arrive).
enum class RingOrder { kStepByStep, kForward };

// One phase of the ring: n-1 steps, under rounds first_round .. first_round + n - 2 (Note
// [Message steps]). At step s this rank sends step(s).send to its right neighbour and receives
// step(s).recv from its left. With `reduce`, received elements are combined with `op` into what
// the receive buffer holds as they arrive (Transport::irecv_reduce); `dtype` sizes the elements
// either way. Segments of kRingSegmentBytes.
void ring_phase(Context& ctx, uint32_t first_round, DType dtype, ReduceOp op, bool reduce,
                RingOrder order, const std::function<RingStep(int s)>& step);

// Neighbours and block indices on the ring: rank r sends to r + 1 and receives from r - 1.
inline int ring_index(int i, int n) {
  return ((i % n) + n) % n;
}

}  // namespace cohort::algo
