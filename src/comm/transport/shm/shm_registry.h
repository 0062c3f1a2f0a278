// Registered memory: buffers that the ranks of a node share, so that the shared-memory
// collectives read and write the peers' data in place instead of staging it through the
// window's slots (algorithms/registered_view.h).
//
// Note [Registered buffers]
// Group::allocate_registered is collective. On a node with a shared-memory window each local
// rank makes an anonymous segment (memfd: never in /dev/shm) of the same size, offers its
// descriptor in a window round, maps every peer's through /proc/<pid>/fd/<fd>, and says in a
// second round whether it mapped them all. Then every rank closes its descriptor: from here on
// only the mappings hold the memory, and the kernel frees it with the last one, however the
// processes end (kill -9 included). If any rank failed, every rank of the node keeps its own
// copy as private memory (shared() is false) and the node's collectives on it stay staged.
// Every registration of a window gets the next region number, the same on every local rank.
//
// A collective knows a buffer of registered memory from the buffer itself: Buffer::registered
// (set by RegisteredMemory::buffer) rides on the call to the algorithm, which never looks an
// address up. A registered buffer is posted in its first round as (region, offset) (ShmPlace),
// any other as region 0, and the window throws
// MismatchError on every rank when the local ranks disagree, so that nobody reads private
// memory as shared. With the same region on every rank, a rank reads and writes peer q's
// buffer at q's offset in its own mapping of q's copy: a region holds every local rank's copy,
// so that it outlives the peers (a dead peer's pages stay mapped: a PeerError, not a crash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cohort/core/deadline.h"
#include "transport/shm/shm_segment.h"

namespace cohort {

class ShmWindow;
struct ShmRoundCall;

class ShmRegistry;

// One registration that every local rank mapped, as this rank sees it: every local rank's
// copy, mapped here.
class ShmRegion {
 public:
  ShmRegion(std::shared_ptr<ShmRegistry> registry, uint32_t id, size_t bytes,
            std::vector<ShmSegment> copies, int own_rank);
  ~ShmRegion();
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  uint32_t id() const { return id_; }
  const ShmRegistry* registry() const { return registry_.get(); }
  size_t bytes() const { return bytes_; }
  // Local rank r's copy (this rank's own for r == own rank).
  uint8_t* copy(int rank) const {
    return static_cast<uint8_t*>(copies_[static_cast<size_t>(rank)].data());
  }
  uint8_t* own() const { return copy(own_rank_); }

 private:
  std::shared_ptr<ShmRegistry> registry_;
  uint32_t id_;
  size_t bytes_;
  std::vector<ShmSegment> copies_;  // by local rank
  int own_rank_;
};

class ShmRegistry : public std::enable_shared_from_this<ShmRegistry> {
 public:
  // Collective over the ranks of `window` (Note [Registered buffers]). Runs in the group's
  // collective order: its rounds are the window's. `bytes` is the same on every local rank
  // (the caller's call stamp checks it). Null on every local rank when one of them could not
  // make or map a copy (logged): the caller falls back to private memory.
  std::shared_ptr<ShmRegion> allocate(ShmWindow& window, size_t bytes, const ShmRoundCall& call,
                                      Deadline deadline);

 private:
  // A buffer of a region is known by the Buffer that carries its RegisteredMemory
  // (Buffer::registered), never looked up by address: the registry only numbers regions.
  std::mutex mutex_;
  uint32_t next_id_ = 1;  // 0 means private memory (ShmPlace)
};

}  // namespace cohort
