// What an engine may ask of its group while it is made (Note [Backends] in backends/backend.h):
// the ranks, a broadcast and an all-gather of host bytes (NCCL's unique id, the ranks' device
// checks), and the group's transport (MPI's engine is its transport). An engine never sees the
// Group: group/group_host_collectives.h lends a group through this interface.
#pragma once

#include <cstddef>
#include <memory>

#include "cohort/comm/transport.h"
#include "cohort/core/deadline.h"

namespace cohort {

class HostCollectives {
 public:
  virtual ~HostCollectives() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: rank `root`'s `bytes` at `data` land at `data` on every rank.
  virtual void broadcast(void* data, size_t bytes, int root, Deadline deadline) = 0;
  // Collective: every rank's `bytes` at `in` land at out + rank * bytes on every rank.
  virtual void allgather(const void* in, void* out, size_t bytes, Deadline deadline) = 0;
  // The transport the group runs its host collectives on.
  virtual const std::shared_ptr<Transport>& transport() const = 0;
};

}  // namespace cohort
