#include "algorithms/shm_rounds.h"

#include <algorithm>

#include "algorithms/registered_view.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

ShmRounds::ShmRounds(Context& ctx, std::vector<Range> pieces, size_t esize, const char* what)
    : ctx_(ctx), pieces_(std::move(pieces)), esize_(esize), what_(what) {
  const ShmWindow& window = *ctx.shm();
  const size_t parts = static_cast<size_t>(window.size());
  part_elems_ = std::max<size_t>(1, window.slot_bytes() / (parts * esize));
  size_t longest = 0;
  for (const Range& piece : pieces_) longest = std::max(longest, piece.count);
  rounds_ = (longest + part_elems_ - 1) / part_elems_;
}

Range ShmRounds::part(int p, size_t j) const {
  const Range& piece = pieces_[static_cast<size_t>(p)];
  const size_t offset = std::min(piece.count, j * part_elems_);
  return Range{piece.begin + offset, std::min(part_elems_, piece.count - offset)};
}

void ShmRounds::reduce_scatter(size_t j, const uint8_t* in, uint8_t* own_out, DType dtype,
                               ReduceOp op, int divisor) {
  ShmWindow& window = *ctx_.shm();
  const int n = window.size();
  const int me = window.rank();
  const uint64_t round = window.next_round();
  uint8_t* staging = window.slot(me, round);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const Range r = part(p, j);
    kernels::copy(staging + static_cast<size_t>(p) * part_elems_ * esize_, in + r.begin * esize_,
                  r.count * esize_);
  }
  ctx_.post_shm_round(round, what_);
  const Range own = part(me, j);
  uint8_t* target = own_out + (own.begin - pieces_[static_cast<size_t>(me)].begin) * esize_;
  // Note [Reduction order] in algorithms.h: rank order, this rank's own part in its place.
  const size_t my_offset = static_cast<size_t>(me) * part_elems_ * esize_;
  std::vector<const uint8_t*> sources(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    sources[static_cast<size_t>(p)] =
        p == me ? in + own.begin * esize_ : window.slot(p, round) + my_offset;
  }
  reduce_in_rank_order(sources, target, own.count, dtype, op, ctx_);
  if (divisor > 1) kernels::divide(target, own.count, dtype, divisor);
}

void ShmRounds::all_gather(size_t j, const uint8_t* own_in, uint8_t* out) {
  ShmWindow& window = *ctx_.shm();
  const int n = window.size();
  const int me = window.rank();
  const uint64_t round = window.next_round();
  const Range own = part(me, j);
  const uint8_t* source = own_in + (own.begin - pieces_[static_cast<size_t>(me)].begin) * esize_;
  kernels::copy(window.slot(me, round), source, own.count * esize_);
  if (out + own.begin * esize_ != source) {
    kernels::copy(out + own.begin * esize_, source, own.count * esize_);
  }
  ctx_.post_shm_round(round, what_);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const Range r = part(p, j);
    kernels::copy(out + r.begin * esize_, window.slot(p, round), r.count * esize_);
  }
}

std::vector<Range> even_pieces(size_t count, int n) {
  std::vector<Range> pieces;
  for (int p = 0; p < n; ++p) {
    pieces.push_back(chunk_range(count, static_cast<size_t>(n), static_cast<size_t>(p)));
  }
  return pieces;
}

std::vector<Range> block_pieces(size_t block, int n) {
  std::vector<Range> pieces;
  for (int p = 0; p < n; ++p) pieces.push_back(Range{static_cast<size_t>(p) * block, block});
  return pieces;
}

}  // namespace cohort::algo
