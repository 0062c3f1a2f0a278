#include "algorithms/ring.h"

#include <memory>
#include <vector>

#include "algorithms/chunking.h"
#include "algorithms/primitives.h"
#include "cohort/core/check.h"

namespace cohort::algo {

namespace {

// The transfers of one ring phase, segment by segment.
class RingPhase {
 public:
  RingPhase(Context& ctx, uint32_t first_round, DType dtype, ReduceOp op, bool reduce)
      : ctx_(ctx),
        first_round_(first_round),
        dtype_(dtype),
        op_(op),
        reduce_(reduce),
        esize_(dtype_size(dtype)),
        seg_(segment_elems(kRingSegmentBytes, esize_)),
        right_(ring_index(ctx.rank() + 1, ctx.size())),
        left_(ring_index(ctx.rank() - 1, ctx.size())) {}

  size_t segments(size_t count) const { return segment_count(count, seg_); }

  std::unique_ptr<Request> recv(int s, const RingStep& at, size_t k) {
    const Range piece = segment_of(at.recv_count, seg_, k);
    uint8_t* target = static_cast<uint8_t*>(at.recv) + piece.begin * esize_;
    return reduce_ ? ctx_.irecv_reduce(left_, step_of(s, k), target, piece.count, dtype_, op_)
                   : ctx_.irecv(left_, step_of(s, k), target, piece.count * esize_);
  }

  std::unique_ptr<Request> send(int s, const RingStep& at, size_t k) {
    const Range piece = segment_of(at.send_count, seg_, k);
    return ctx_.isend(right_, step_of(s, k),
                      static_cast<const uint8_t*>(at.send) + piece.begin * esize_,
                      piece.count * esize_);
  }

 private:
  Step step_of(int s, size_t k) const {
    return Step(first_round_ + static_cast<uint32_t>(s), static_cast<uint32_t>(k));
  }

  Context& ctx_;
  uint32_t first_round_;
  DType dtype_;
  ReduceOp op_;
  bool reduce_;
  size_t esize_, seg_;
  int right_, left_;
};

void step_by_step(RingPhase& phase, int steps, const std::function<RingStep(int s)>& step) {
  std::vector<std::unique_ptr<Request>> requests;
  for (int s = 0; s < steps; ++s) {
    const RingStep at = step(s);
    for (size_t k = 0; k < phase.segments(at.recv_count); ++k) {
      requests.push_back(phase.recv(s, at, k));
    }
    for (size_t k = 0; k < phase.segments(at.send_count); ++k) {
      requests.push_back(phase.send(s, at, k));
    }
    wait_all(requests);
  }
}

void forward(RingPhase& phase, int steps, const std::function<RingStep(int s)>& step) {
  std::vector<RingStep> at;
  std::vector<std::vector<std::unique_ptr<Request>>> recvs(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    at.push_back(step(s));
    for (size_t k = 0; k < phase.segments(at[s].recv_count); ++k) {
      recvs[s].push_back(phase.recv(s, at[s], k));
    }
  }
  std::vector<std::unique_ptr<Request>> sends;
  for (size_t k = 0; k < phase.segments(at[0].send_count); ++k) {
    sends.push_back(phase.send(0, at[0], k));
  }
  for (int s = 1; s < steps; ++s) {
    COHORT_INTERNAL_ASSERT(at[s].send == at[s - 1].recv && at[s].send_count == at[s - 1].recv_count,
                           "RingOrder::kForward: step ", s, " does not send what step ", s - 1,
                           " received");
    for (size_t k = 0; k < recvs[s - 1].size(); ++k) {
      recvs[s - 1][k]->wait();
      sends.push_back(phase.send(s, at[s], k));
    }
  }
  wait_all(recvs[steps - 1]);
  wait_all(sends);
}

}  // namespace

void ring_phase(Context& ctx, uint32_t first_round, DType dtype, ReduceOp op, bool reduce,
                RingOrder order, const std::function<RingStep(int s)>& step) {
  const int steps = ctx.size() - 1;
  if (steps <= 0) return;
  RingPhase phase(ctx, first_round, dtype, op, reduce);
  if (order == RingOrder::kForward) {
    forward(phase, steps, step);
  } else {
    step_by_step(phase, steps, step);
  }
}

}  // namespace cohort::algo
