// How a buffer of `count` elements is cut into `parts` contiguous chunks: the first
// count % parts chunks get one element more. Every algorithm that splits data uses this, so all
// ranks agree on the boundaries.
#pragma once

#include <cstddef>

namespace cohort {

struct Range {
  size_t begin = 0;
  size_t count = 0;
  size_t end() const { return begin + count; }
};

inline Range chunk_range(size_t count, size_t parts, size_t index) {
  const size_t base = count / parts;
  const size_t extra = count % parts;
  const size_t begin = index * base + (index < extra ? index : extra);
  return Range{begin, base + (index < extra ? 1 : 0)};
}

// Number of segments of at most `segment` elements needed to cover `count` (at least 1, so a
// zero-length chunk still sends one empty message and the ranks stay in step).
inline size_t segment_count(size_t count, size_t segment) {
  return count == 0 ? 1 : (count + segment - 1) / segment;
}

}  // namespace cohort
