// kernels::copy against the bytes it must produce: sizes around memcpy's hand-over and the
// vector loop's 128-byte stride, every misalignment of source and destination, and nothing
// written outside the destination.
#include "kernels/copy_kernel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cohort {
namespace {

constexpr uint8_t kGuard = 0xA5;
constexpr size_t kPad = 64;

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 12345;
  for (auto& b : v) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 16);
  }
  return v;
}

using CopyFn = void (*)(void*, const void*, size_t);

void check_copy(CopyFn copy, size_t bytes, size_t src_offset, size_t dst_offset) {
  SCOPED_TRACE("bytes=" + std::to_string(bytes) + " src+" + std::to_string(src_offset) + " dst+" +
               std::to_string(dst_offset));
  const std::vector<uint8_t> source = pattern(bytes + src_offset);
  std::vector<uint8_t> target(kPad + dst_offset + bytes + kPad, kGuard);
  uint8_t* dst = target.data() + kPad + dst_offset;
  copy(dst, source.data() + src_offset, bytes);
  for (size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(dst[i], source[src_offset + i]) << "byte " << i;
  }
  for (size_t i = 0; i < kPad + dst_offset; ++i) ASSERT_EQ(target[i], kGuard) << "before, " << i;
  for (size_t i = kPad + dst_offset + bytes; i < target.size(); ++i) {
    ASSERT_EQ(target[i], kGuard) << "after, " << i;
  }
}

TEST(CopyKernelTest, EverySizeAroundTheThresholdsAndEveryMisalignment) {
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{127}, size_t{2047}, size_t{2048}, size_t{2049},
        size_t{2048 + 127}, size_t{2048 + 128}, size_t{4096 + 1}, size_t{65536 + 63}}) {
    for (size_t src_offset = 0; src_offset < 33; src_offset += 7) {
      for (size_t dst_offset = 0; dst_offset < 33; dst_offset += 5) {
        check_copy(&kernels::copy, bytes, src_offset, dst_offset);
        check_copy(&kernels::detail::copy_without_avx2, bytes, src_offset, dst_offset);
      }
    }
  }
}

TEST(CopyKernelTest, LargeCopy) {
  check_copy(&kernels::copy, (size_t{1} << 22) + 3, 1, 2);
  check_copy(&kernels::detail::copy_without_avx2, (size_t{1} << 22) + 3, 1, 2);
}

}  // namespace
}  // namespace cohort
