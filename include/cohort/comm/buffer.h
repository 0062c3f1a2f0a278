// Typed views of memory that collectives read and write: pointer + element count + dtype, and
// where the memory is (host, or a CUDA device for the NCCL backend: cohort/comm/nccl.h).
#pragma once

#include <cstddef>
#include <vector>

#include "cohort/core/dtype.h"

namespace cohort {

class RegisteredMemory;  // registered_memory.h

inline constexpr int kHostMemory = -1;

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  // kHostMemory, or the index of the CUDA device the memory is on. Last, so that Buffer{p, n,
  // dtype} still means host memory. Only groups on an engine that handles device memory
  // (NCCL) accept device buffers; cohort's own algorithms refuse them (InvalidArgument).
  int device = kHostMemory;
  // The registered memory (Group::allocate_registered) the buffer lies in, where it does:
  // RegisteredMemory::buffer() sets it. The shared-memory algorithms then run on the buffer in
  // place (Note [Registered buffers] in src/comm/transport/shm/shm_registry.h); null: an
  // ordinary buffer, copied through the group's window.
  const RegisteredMemory* registered = nullptr;
  size_t bytes() const { return count * dtype_size(dtype); }
  bool on_device() const { return device != kHostMemory; }
};

struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  int device = kHostMemory;                      // as Buffer::device
  const RegisteredMemory* registered = nullptr;  // as Buffer::registered
  ConstBuffer() = default;
  ConstBuffer(const void* d, size_t n, DType t, int dev = kHostMemory)
      : data(d), count(n), dtype(t), device(dev) {}
  ConstBuffer(const Buffer& b)  // NOLINT: a Buffer is readable wherever a ConstBuffer is asked
      : data(b.data), count(b.count), dtype(b.dtype), device(b.device), registered(b.registered) {}
  size_t bytes() const { return count * dtype_size(dtype); }
  bool on_device() const { return device != kHostMemory; }
};

template <typename T>
Buffer make_buffer(T* data, size_t count) {
  return Buffer{data, count, dtype_of<T>};
}
template <typename T>
Buffer make_buffer(std::vector<T>& v) {
  return Buffer{v.data(), v.size(), dtype_of<T>};
}
template <typename T>
ConstBuffer make_buffer(const std::vector<T>& v) {
  return ConstBuffer{v.data(), v.size(), dtype_of<T>};
}

}  // namespace cohort
