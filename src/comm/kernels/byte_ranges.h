// Whether two byte ranges share memory: the kernels' aliasing rules, the in-place collectives'
// overlapping outputs and the NCCL backend's in-place forms all ask it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::kernels {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte (an empty range shares none).
// Compared as integers: relational operators on pointers into different objects are
// unspecified.
inline bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace cohort::kernels
