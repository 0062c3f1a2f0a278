// Registered memory: buffers that the ranks of a node share, allocated by
// Group::allocate_registered. The group's shared-memory collectives read and write the peers'
// registered buffers in place instead of copying every byte through a staging window
// (docs/algorithms.md, "Registered buffers"). DistributedDataParallel keeps its gradient
// buckets in it (and ZeRO stage 1 its persistent buckets).
#pragma once

#include <cstddef>
#include <memory>

#include "cohort/comm/buffer.h"

namespace cohort {

class RegisteredMemory {
 public:
  // For Group::allocate_registered: `owner` keeps the memory (and the peers' mappings) alive.
  RegisteredMemory(std::shared_ptr<void> owner, void* data, size_t bytes, bool shared)
      : owner_(std::move(owner)), data_(data), bytes_(bytes), shared_(shared) {}

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Whether the other ranks of this rank's node map this memory, so that collectives on it
  // run in place. False where the node has one rank of the group, shared memory is off
  // (COHORT_SHM=0), the group has no shared-memory window (in-process, MPI and NCCL groups,
  // subgroups), or the node could not share it (logged): then it is ordinary private memory
  // and every collective takes it as before.
  bool shared() const { return shared_; }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // count elements of T from element `offset` (no bounds beyond bytes() are allowed), marked
  // as lying in this memory (Buffer::registered).
  template <typename T>
  Buffer buffer(size_t offset, size_t count) const {
    return buffer(as<T>() + offset, count, dtype_of<T>);
  }
  // The buffer of `count` elements of `dtype` at `data`, which must lie in this memory, marked
  // as such: what a caller that keeps typed views of the memory (a DDP bucket) passes.
  Buffer buffer(void* data, size_t count, DType dtype) const {
    Buffer b{data, count, dtype};
    b.registered = this;
    return b;
  }
  // For the comm layer: what keeps the memory, the shared-memory region where shared().
  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  std::shared_ptr<void> owner_;
  void* data_;
  size_t bytes_;
  bool shared_;
};

}  // namespace cohort
