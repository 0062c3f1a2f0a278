// A Group lent to an engine as its HostCollectives (backends/host_collectives.h).
#pragma once

#include "backends/host_collectives.h"
#include "cohort/comm/group.h"

namespace cohort {

class GroupHostCollectives final : public HostCollectives {
 public:
  explicit GroupHostCollectives(Group& group) : group_(group) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  void broadcast(void* data, size_t bytes, int root, Deadline deadline) override;
  void allgather(const void* in, void* out, size_t bytes, Deadline deadline) override;
  const std::shared_ptr<Transport>& transport() const override;

 private:
  Group& group_;
};

}  // namespace cohort
