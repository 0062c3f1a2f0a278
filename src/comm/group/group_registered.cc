// Group::allocate_registered (cohort/comm/registered_memory.h): a collective that runs in the
// group's collective order, because on a node with a shared-memory window it uses the window's
// rounds (Note [Registered buffers] in transport/shm/shm_registry.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "algorithms/context.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "group/group_impl.h"
#include "transport/shm/shm_registry.h"
#include "transport/shm/shm_window.h"

namespace cohort {

namespace {

constexpr size_t kAlignment = 4096;  // as the shared copies, which are whole pages

std::shared_ptr<RegisteredMemory> private_memory(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* data = std::aligned_alloc(kAlignment, rounded);
  if (data == nullptr) {
    throw ConfigError(detail::concat("allocate_registered: cannot allocate ", bytes, " bytes"));
  }
  std::memset(data, 0, rounded);
  std::shared_ptr<void> owner(data, std::free);
  return std::make_shared<RegisteredMemory>(std::move(owner), data, bytes, false);
}

std::shared_ptr<RegisteredMemory> allocate_on_node(algo::Context& ctx, size_t bytes) {
  ShmWindow* window = ctx.shm();
  if (window == nullptr || window->size() == 1) return private_memory(bytes);
  std::shared_ptr<ShmRegion> region = window->registry().allocate(
      *window, bytes, ShmRoundCall{ctx.sequence(), ctx.stamp()}, ctx.deadline());
  if (!region) return private_memory(bytes);
  void* data = region->own();
  return std::make_shared<RegisteredMemory>(std::move(region), data, bytes, true);
}

}  // namespace

std::shared_ptr<RegisteredMemory> Group::allocate_registered(size_t bytes,
                                                             const CollectiveOptions& opts) {
  Operation op;
  // Stamped as a barrier of `bytes` int8 elements: the dtype tells it from a real barrier
  // (uint8, count 0) in the call checks, so a rank allocating while another is in a barrier is
  // a MismatchError, not shifted window rounds.
  op.signature = {CollectiveKind::kBarrier, bytes, DType::kInt8, ReduceOp::kSum, 0};
  op.signature.site = CallSite::kRegisteredMemory;
  op.timeout = impl_->timeout_for(opts);
  auto result = std::make_shared<std::shared_ptr<RegisteredMemory>>();
  op.body = [result, bytes](algo::Context& ctx) { *result = allocate_on_node(ctx, bytes); };
  impl_->run_blocking(std::move(op));
  return *result;
}

}  // namespace cohort
