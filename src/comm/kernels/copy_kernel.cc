#include "kernels/copy_kernel.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define COHORT_VECTOR_COPY 1
#else
#define COHORT_VECTOR_COPY 0
#endif

namespace cohort::kernels {

namespace {

// Below this memcpy's own vector code runs (glibc switches to rep movsb above ~2 KiB).
constexpr size_t kSmallBytes = 2048;

#if COHORT_VECTOR_COPY
constexpr size_t kStride = 128;  // bytes per iteration: four 32-byte or eight 16-byte vectors

__attribute__((target("avx2"))) void copy_avx2(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t i = 0;
  for (; i + kStride <= n; i += kStride) {
    const auto* s = reinterpret_cast<const __m256i*>(src + i);
    auto* d = reinterpret_cast<__m256i*>(dst + i);
    const __m256i a = _mm256_loadu_si256(s);
    const __m256i b = _mm256_loadu_si256(s + 1);
    const __m256i c = _mm256_loadu_si256(s + 2);
    const __m256i e = _mm256_loadu_si256(s + 3);
    _mm256_storeu_si256(d, a);
    _mm256_storeu_si256(d + 1, b);
    _mm256_storeu_si256(d + 2, c);
    _mm256_storeu_si256(d + 3, e);
  }
  std::memcpy(dst + i, src + i, n - i);
}

void copy_sse2(uint8_t* dst, const uint8_t* src, size_t n) {
  size_t i = 0;
  for (; i + kStride <= n; i += kStride) {
    const auto* s = reinterpret_cast<const __m128i*>(src + i);
    auto* d = reinterpret_cast<__m128i*>(dst + i);
    __m128i v[8];
    for (int k = 0; k < 8; ++k) v[k] = _mm_loadu_si128(s + k);
    for (int k = 0; k < 8; ++k) _mm_storeu_si128(d + k, v[k]);
  }
  std::memcpy(dst + i, src + i, n - i);
}

bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

void copy_impl(void* dst, const void* src, size_t bytes, bool avx2) {
#if COHORT_VECTOR_COPY
  if (bytes >= kSmallBytes) {
    auto* d = static_cast<uint8_t*>(dst);
    const auto* s = static_cast<const uint8_t*>(src);
    if (avx2 && cpu_has_avx2()) return copy_avx2(d, s, bytes);
    return copy_sse2(d, s, bytes);
  }
#endif
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

}  // namespace

void copy(void* dst, const void* src, size_t bytes) {
  copy_impl(dst, src, bytes, true);
}

namespace detail {
void copy_without_avx2(void* dst, const void* src, size_t bytes) {
  copy_impl(dst, src, bytes, false);
}
}  // namespace detail

}  // namespace cohort::kernels
