#include "algorithms/registered_view.h"

#include <algorithm>

#include "cohort/comm/registered_memory.h"
#include "cohort/core/check.h"
#include "kernels/copy_kernel.h"
#include "kernels/reduce_kernels.h"
#include "transport/shm/shm_registry.h"
#include "transport/shm/shm_window.h"

namespace cohort::algo {

namespace {
constexpr size_t kBlockBytes = 16 * 1024;
}

RegisteredView::RegisteredView(Context& ctx, const void* data, size_t bytes)
    : ctx_(ctx), bytes_(bytes) {
  ShmWindow& window = *ctx.shm();
  if (bytes == 0) return;  // nothing to share: the staged path returns at once
  for (const RegisteredMemory* memory : {ctx.registered().in, ctx.registered().out}) {
    if (memory == nullptr || !memory->shared()) continue;
    // A shared RegisteredMemory is kept by its region (group_registered.cc).
    auto region = std::static_pointer_cast<const ShmRegion>(memory->owner());
    const auto* begin = static_cast<const uint8_t*>(data);
    const uint8_t* own = region->own();
    if (begin < own || begin + bytes > own + region->bytes()) continue;  // the other buffer's
    // Memory another group registered is not mapped by this group's ranks: copied, as any.
    if (region->registry() != &window.registry()) continue;
    region_ = std::move(region);
    offset_ = static_cast<uint64_t>(begin - own);
    return;
  }
}

RegisteredView::~RegisteredView() = default;

int RegisteredView::rank() const {
  return ctx_.shm()->rank();
}

int RegisteredView::size() const {
  return ctx_.shm()->size();
}

void RegisteredView::post_ready(const char* what) {
  ShmWindow& window = *ctx_.shm();
  const uint64_t round = window.next_round();
  ctx_.post_shm_round(round, what, ShmPlace{region_->id(), offset_});
  buffers_.resize(static_cast<size_t>(window.size()));
  for (int r = 0; r < window.size(); ++r) {
    const ShmPlace place = window.place(r, round);
    // The region is the same on every rank (checked by the wait); the offset is each rank's.
    COHORT_CHECK(place.offset + bytes_ <= region_->bytes(), what, ": rank ", window.group_rank(r),
                 " passed ", bytes_, " bytes at offset ", place.offset, " of registered memory #",
                 region_->id(), " of ", region_->bytes(), " bytes");
    buffers_[static_cast<size_t>(r)] = region_->copy(r) + place.offset;
  }
}

void RegisteredView::post_done(const char* what) {
  ctx_.post_shm_round(ctx_.shm()->next_round(), what);
}

size_t registered_block_elems(DType dtype) {
  return kBlockBytes / dtype_size(dtype);
}

void reduce_in_rank_order(const std::vector<const uint8_t*>& sources, uint8_t* dst, size_t count,
                          DType dtype, ReduceOp op, Context& ctx) {
  const ReduceOp combine = kernels::combine_op(op);
  const size_t n = sources.size();
  if (n == 1) {
    if (dst != sources[0]) kernels::copy(dst, sources[0], count * dtype_size(dtype));
    return;
  }
  const bool aliases_later_source =
      std::find(sources.begin() + 2, sources.end(), dst) != sources.end();
  if (!aliases_later_source) {
    kernels::reduce_pair(dst, sources[0], sources[1], count, dtype, combine);
    for (size_t q = 2; q < n; ++q) kernels::reduce_into(dst, sources[q], count, dtype, combine);
    return;
  }
  // dst is a later source: combining into it would change it before its turn.
  const size_t esize = dtype_size(dtype);
  const size_t block = registered_block_elems(dtype);
  uint8_t* tmp = ctx.scratch(block * esize);
  for (size_t begin = 0; begin < count; begin += block) {
    const size_t length = std::min(block, count - begin);
    const size_t at = begin * esize;
    kernels::reduce_pair(tmp, sources[0] + at, sources[1] + at, length, dtype, combine);
    for (size_t q = 2; q < n; ++q) {
      kernels::reduce_into(tmp, sources[q] + at, length, dtype, combine);
    }
    kernels::copy(dst + at, tmp, length * esize);
  }
}

}  // namespace cohort::algo
