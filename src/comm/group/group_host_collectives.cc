#include "group/group_host_collectives.h"

#include <algorithm>
#include <chrono>

#include "group/group_access.h"
#include "group/group_impl.h"

namespace cohort {

namespace {

// What is left of `deadline`, at least a millisecond (0 would mean the group's own timeout).
CollectiveOptions options_until(Deadline deadline, int root = 0) {
  CollectiveOptions opts;
  opts.timeout =
      std::max(std::chrono::duration_cast<Milliseconds>(deadline.remaining()), Milliseconds(1));
  opts.root = root;
  return opts;
}

}  // namespace

void GroupHostCollectives::broadcast(void* data, size_t bytes, int root, Deadline deadline) {
  group_.broadcast(Buffer{data, bytes, DType::kUInt8}, options_until(deadline, root));
}

void GroupHostCollectives::allgather(const void* in, void* out, size_t bytes, Deadline deadline) {
  group_.allgather(ConstBuffer{in, bytes, DType::kUInt8},
                   Buffer{out, bytes * static_cast<size_t>(group_.size()), DType::kUInt8},
                   options_until(deadline));
}

const std::shared_ptr<Transport>& GroupHostCollectives::transport() const {
  return impl_of(group_).shared_transport();
}

}  // namespace cohort
