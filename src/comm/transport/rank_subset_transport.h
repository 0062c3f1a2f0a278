// A view of some ranks of a transport as a transport of their own, for algorithms that run a
// phase among a subset of the group (hierarchical allreduce: the ranks with the same local
// rank on every node). Rank i of the view is members[i] of the underlying transport; messages
// go over the underlying connections with the caller's tags, so the view needs no set-up and
// owns nothing.
#pragma once

#include <vector>

#include "cohort/comm/transport.h"

namespace cohort {

class RankSubsetTransport final : public Transport {
 public:
  // `members` must contain transport.rank().
  RankSubsetTransport(Transport& transport, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const char* name() const override { return transport_.name(); }

  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override;
  std::unique_ptr<Request> irecv_reduce(int peer, Tag tag, void* accumulate, size_t count,
                                        DType dtype, ReduceOp op, Deadline deadline) override;
  void abort(std::exception_ptr error) noexcept override { transport_.abort(error); }
  // A narrower view of the same transport (its members, through this view's numbering); like
  // this one, it lives no longer than the transport and shares its tags.
  std::unique_ptr<Transport> split(const SplitSpec& spec) override;

 private:
  int member(int peer) const { return members_[static_cast<size_t>(peer)]; }

  Transport& transport_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace cohort
