#include "algorithms/primitives.h"

#include "cohort/core/check.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"

namespace cohort::algo {

void post_sends(Context& ctx, int peer, uint64_t round, const void* data, size_t count,
                size_t esize, size_t seg, std::vector<std::unique_ptr<Request>>& requests) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t k = 0, segments = segments_in(count, seg); k < segments; ++k) {
    const Range s = segment_of(count, seg, k);
    requests.push_back(
        ctx.isend(peer, step_id(round, k), bytes + s.begin * esize, s.count * esize));
  }
}

void post_recvs(Context& ctx, int peer, uint64_t round, void* data, size_t count, size_t esize,
                size_t seg, std::vector<std::unique_ptr<Request>>& requests) {
  auto* bytes = static_cast<uint8_t*>(data);
  for (size_t k = 0, segments = segments_in(count, seg); k < segments; ++k) {
    const Range s = segment_of(count, seg, k);
    requests.push_back(
        ctx.irecv(peer, step_id(round, k), bytes + s.begin * esize, s.count * esize));
  }
}

// ---------------------------------------------------------------- SegmentReceiver

SegmentReceiver::SegmentReceiver(Context& ctx, int peer, uint64_t round, size_t count, size_t esize,
                                 size_t seg, uint8_t* slots)
    : ctx_(&ctx),
      peer_(peer),
      round_(round),
      count_(count),
      esize_(esize),
      seg_(seg),
      segments_(segments_in(count, seg)),
      slots_(slots),
      pending_(kWindowSegments) {
  for (size_t k = 0; k < segments_ && k < kWindowSegments; ++k) post(k);
}

void SegmentReceiver::post(size_t k) {
  const size_t slot = k % kWindowSegments;
  pending_[slot] = ctx_->irecv(peer_, step_id(round_, k), slots_ + slot * seg_ * esize_,
                               segment_of(count_, seg_, k).count * esize_);
}

const uint8_t* SegmentReceiver::next() {
  COHORT_INTERNAL_ASSERT(next_ < segments_, "segment ", next_, " of ", segments_, " requested");
  // The caller is done with the previous segment: its slot takes the next one in line.
  if (next_ > 0 && next_ - 1 + kWindowSegments < segments_) post(next_ - 1 + kWindowSegments);
  const size_t slot = next_ % kWindowSegments;
  pending_[slot]->wait();
  pending_[slot].reset();
  ++next_;
  return slots_ + slot * seg_ * esize_;
}

bool reduce_scatter_without_peers(Context& ctx, const void* in, void* out, size_t block_bytes) {
  if (block_bytes == 0) return true;
  if (ctx.size() > 1) return false;
  if (out != in) kernels::copy(out, in, block_bytes);
  return true;
}

void recv_combine(Context& ctx, int peer, uint64_t round, void* out, const void* mine, size_t count,
                  DType dtype, ReduceOp op, size_t seg, uint8_t* window) {
  const size_t esize = dtype_size(dtype);
  auto* acc = static_cast<uint8_t*>(out);
  const auto* own = static_cast<const uint8_t*>(mine);
  SegmentReceiver incoming(ctx, peer, round, count, esize, seg, window);
  for (size_t k = 0, segments = segments_in(count, seg); k < segments; ++k) {
    const Range s = segment_of(count, seg, k);
    kernels::reduce_pair(acc + s.begin * esize, own + s.begin * esize, incoming.next(), s.count,
                         dtype, op);
  }
}

// ---------------------------------------------------------------- fold and halving

Fold::Fold(int size) : n(size) {
  while (p * 2 <= n) p *= 2;
  rem = n - p;
}

int Fold::participant(int rank) const {
  if (rank >= 2 * rem) return rank - rem;
  return rank % 2 == 1 ? rank / 2 : -1;
}

void recursive_halving(Context& ctx, const Fold& fold, const std::vector<size_t>& bounds,
                       const uint8_t* src, uint8_t* work, DType dtype, ReduceOp op, uint8_t* window,
                       uint64_t first_round) {
  const int me = fold.participant(ctx.rank());
  const size_t esize = dtype_size(dtype);
  const size_t seg = pipeline_segment(esize);
  int lo = 0;
  int hi = fold.p;
  uint64_t round = first_round;
  const uint8_t* from = src;
  for (int d = fold.p / 2; d >= 1; d /= 2, ++round) {
    const int mid = lo + d;
    const bool keep_low = (me & d) == 0;
    const int keep_lo = keep_low ? lo : mid;
    const int give_lo = keep_low ? mid : lo;
    const size_t keep_begin = bounds[keep_lo];
    const size_t keep_count = bounds[keep_lo + d] - keep_begin;
    const size_t give_begin = bounds[give_lo];
    const size_t give_count = bounds[give_lo + d] - give_begin;
    const int peer = fold.rank_of(me ^ d);
    std::vector<std::unique_ptr<Request>> sends;
    post_sends(ctx, peer, round, from + give_begin * esize, give_count, esize, seg, sends);
    recv_combine(ctx, peer, round, work + keep_begin * esize, from + keep_begin * esize, keep_count,
                 dtype, op, seg, window);
    wait_all(sends);
    from = work;
    lo = keep_lo;
    hi = keep_lo + d;
  }
  COHORT_INTERNAL_ASSERT(lo == me && hi == me + 1, "halving ended on [", lo, ", ", hi,
                         ") instead of participant ", me);
}

}  // namespace cohort::algo
