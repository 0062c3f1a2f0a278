#include "transport/rank_subset_transport.h"

#include <algorithm>

#include "cohort/core/check.h"

namespace cohort {

RankSubsetTransport::RankSubsetTransport(Transport& transport, std::vector<int> members)
    : transport_(transport), members_(std::move(members)) {
  const auto it = std::find(members_.begin(), members_.end(), transport.rank());
  COHORT_INTERNAL_ASSERT(it != members_.end(), "rank ", transport.rank(),
                         " is not a member of its own subset");
  rank_ = static_cast<int>(it - members_.begin());
}

std::unique_ptr<Request> RankSubsetTransport::isend(int peer, Tag tag, const void* data,
                                                    size_t bytes, Deadline deadline) {
  return transport_.isend(member(peer), tag, data, bytes, deadline);
}

std::unique_ptr<Request> RankSubsetTransport::irecv(int peer, Tag tag, void* data, size_t bytes,
                                                    Deadline deadline) {
  return transport_.irecv(member(peer), tag, data, bytes, deadline);
}

std::unique_ptr<Request> RankSubsetTransport::irecv_reduce(int peer, Tag tag, void* accumulate,
                                                           size_t count, DType dtype, ReduceOp op,
                                                           Deadline deadline) {
  return transport_.irecv_reduce(member(peer), tag, accumulate, count, dtype, op, deadline);
}

std::unique_ptr<Transport> RankSubsetTransport::split(const SplitSpec& spec) {
  std::vector<int> underlying;
  for (int member : spec.members) underlying.push_back(this->member(member));
  return std::make_unique<RankSubsetTransport>(transport_, std::move(underlying));
}

}  // namespace cohort
