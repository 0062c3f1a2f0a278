// What a group needs from a device runtime to run cohort's algorithms on device buffers by
// staging them through host memory (Note [Staged device buffers] in staging_backend.h). The
// CUDA implementation is in engines/cuda/ (library cohort::cuda); cohort::comm knows only
// this interface, so that it builds and is tested without CUDA (tests use a host-memory
// stand-in).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cohort/core/deadline.h"

namespace cohort {

// The copies of one call, each direction in issue order. Copies run asynchronously to the
// host: a copy's host memory may be read (to_host) or rewritten (to_device) only after the
// matching wait.
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  // Queues a copy of `bytes` from device memory to host memory.
  virtual void to_host(void* host, const void* device, size_t bytes) = 0;
  // Blocks until the first `n` copies queued by to_host have landed (TimeoutError at the
  // deadline).
  virtual void wait_to_host(size_t n, Deadline deadline) = 0;
  // Queues a copy of `bytes` from host memory to device memory.
  virtual void to_device(void* device, const void* host, size_t bytes) = 0;
  // Blocks until every copy queued by to_device has landed.
  virtual void wait_to_device(Deadline deadline) = 0;
};

class DeviceStaging {
 public:
  virtual ~DeviceStaging() = default;
  // Throws InvalidArgument for a buffer on a device this rank does not stage (another GPU
  // than the group's). Called on the caller's thread, before the call is queued.
  virtual void check_device(int device, const char* what) const = 0;
  // Bytes per chunk of the calls that are staged a chunk at a time (allreduce, broadcast,
  // reduce).
  virtual size_t chunk_bytes() const = 0;
  // Host memory of at least `bytes` that the copies run fastest from (page-locked), reused
  // by every call of the group (grown, never shrunk). Only the thread running the group's
  // operations uses it, one call at a time.
  virtual uint8_t* host_area(size_t bytes) = 0;
  // A staging of the same device and chunk size for a subgroup: each group has its own host
  // area, since groups run their operations concurrently.
  virtual std::shared_ptr<DeviceStaging> for_subgroup() const = 0;
  // The copies of one call on `device`, ordered after the work queued on `stream` (the
  // caller's, CollectiveOptions::stream) before this.
  virtual std::unique_ptr<DeviceCopies> begin(int device, void* stream) = 0;
};

}  // namespace cohort
