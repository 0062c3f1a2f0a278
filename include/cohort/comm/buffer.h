// Typed views of memory that collectives read and write: pointer + element count + dtype.
#pragma once

#include <cstddef>
#include <vector>

#include "cohort/core/dtype.h"

namespace cohort {

struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  size_t bytes() const { return count * dtype_size(dtype); }
};

struct ConstBuffer {
  const void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ConstBuffer() = default;
  ConstBuffer(const void* d, size_t n, DType t) : data(d), count(n), dtype(t) {}
  ConstBuffer(const Buffer& b) : data(b.data), count(b.count), dtype(b.dtype) {}  // NOLINT
  size_t bytes() const { return count * dtype_size(dtype); }
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
