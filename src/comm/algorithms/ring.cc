#include "algorithms/ring.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/chunking.h"

namespace cohort::algo {

namespace {

size_t segment_elems(size_t esize) {
  return std::max<size_t>(1, kRingSegmentBytes / esize);
}

// Segment k of a transfer of `count` elements cut into segments of `seg`.
Range segment(size_t count, size_t seg, size_t k) {
  const size_t begin = k * seg;
  return Range{begin, std::min(seg, count - std::min(begin, count))};
}

}  // namespace

void ring_phase(Context& ctx, uint32_t first_round, DType dtype, ReduceOp op, bool reduce,
                const std::function<RingStep(int s)>& step) {
  const int n = ctx.size();
  const int right = ring_index(ctx.rank() + 1, n);
  const int left = ring_index(ctx.rank() - 1, n);
  const size_t esize = dtype_size(dtype);
  const size_t seg = segment_elems(esize);
  std::vector<std::unique_ptr<Request>> requests;
  for (int s = 0; s < n - 1; ++s) {
    const RingStep at = step(s);
    const uint32_t round = first_round + static_cast<uint32_t>(s);
    auto* recv = static_cast<uint8_t*>(at.recv);
    for (size_t k = 0, segments = segment_count(at.recv_count, seg); k < segments; ++k) {
      const Range piece = segment(at.recv_count, seg, k);
      uint8_t* target = recv + piece.begin * esize;
      const Step id(round, static_cast<uint32_t>(k));
      requests.push_back(reduce ? ctx.irecv_reduce(left, id, target, piece.count, dtype, op)
                                : ctx.irecv(left, id, target, piece.count * esize));
    }
    const auto* send = static_cast<const uint8_t*>(at.send);
    for (size_t k = 0, segments = segment_count(at.send_count, seg); k < segments; ++k) {
      const Range piece = segment(at.send_count, seg, k);
      requests.push_back(ctx.isend(right, Step(round, static_cast<uint32_t>(k)),
                                   send + piece.begin * esize, piece.count * esize));
    }
    wait_all(requests);
  }
}

}  // namespace cohort::algo
