#include "kernels/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cohort/core/check.h"
#include "kernels/byte_ranges.h"
#include "kernels/copy_kernel.h"

// Note [Kernel clones]: on x86-64 Linux with g++ each generic loop is compiled twice, for the
// portable baseline (SSE2) and for x86-64-v3 (AVX2), and the dynamic loader picks one per CPU at
// start-up (GNU ifunc). The binary stays portable; AVX2 machines run 256-bit code, and int64 min,
// max and product vectorize at all only there (SSE2 has no 64-bit compare or multiply).
// bench/micro/check_vectorized.sh lists what vectorized. Define COHORT_NO_KERNEL_CLONES to build
// the baseline alone (and no AVX2 code at all, see Note [16-bit floats on AVX2]). Not under
// ThreadSanitizer: g++ instruments the ifunc resolver, which runs before the TSan runtime is up
// and crashes the program at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(COHORT_NO_KERNEL_CLONES)
#define COHORT_WIDE16 1
#include <immintrin.h>
#define COHORT_AVX2_F16C __attribute__((target("avx2,f16c")))
#if defined(__gnu_linux__) && !defined(__clang__) && __GNUC__ >= 11 && !defined(__SANITIZE_THREAD__)
#define COHORT_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#ifndef COHORT_KERNEL_CLONES
#define COHORT_KERNEL_CLONES
#endif
#ifndef COHORT_WIDE16
#define COHORT_WIDE16 0
#endif

namespace cohort::kernels {

namespace {

// Arithmetic type used for combining elements of T: float16 and bfloat16 combine in float32.
template <typename T>
struct Math {
  using type = T;
};
template <>
struct Math<Half> {
  using type = float;
};
template <>
struct Math<BFloat16> {
  using type = float;
};

template <typename T>
inline typename Math<T>::type load(T v) {
  return v;
}
inline float load(Half v) {
  return half_to_float(v);
}
inline float load(BFloat16 v) {
  return bfloat16_to_float(v);
}

template <typename T>
inline T store(typename Math<T>::type v) {
  return v;
}
template <>
inline Half store<Half>(float v) {
  return float_to_half(v);
}
template <>
inline BFloat16 store<BFloat16>(float v) {
  return float_to_bfloat16(v);
}

// Integers combine through their unsigned twin so that overflow wraps instead of being UB.
template <typename M>
inline M add(M a, M b) {
  if constexpr (std::is_integral_v<M>) {
    using U = std::make_unsigned_t<M>;
    return static_cast<M>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <typename M>
inline M mul(M a, M b) {
  if constexpr (std::is_integral_v<M>) {
    using U = std::make_unsigned_t<M>;
    // Promote to at least unsigned int so that uint8 promotion to int cannot overflow.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<M>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// Note [NaN in min/max]: min and max propagate NaN whichever operand holds it, as
// torch.minimum/maximum do. A plain `b < a ? b : a` keeps a NaN only when it is the first
// operand, so whether a rank's NaN survived would depend on the order in which an algorithm
// combined the ranks, which differs from chunk to chunk in a ring. (The sign of a zero result
// from min(+0, -0) still depends on the order, as with std::min; it compares equal either way.)
template <typename M>
inline bool is_nan(M v) {
  if constexpr (std::is_floating_point_v<M>) {
    return v != v;
  } else {
    return false;
  }
}

struct SumOp {
  template <typename M>
  static M apply(M a, M b) {
    return add(a, b);
  }
};
struct ProductOp {
  template <typename M>
  static M apply(M a, M b) {
    return mul(a, b);
  }
};
struct MinOp {
  template <typename M>
  static M apply(M a, M b) {
    return (b < a || is_nan(b)) ? b : a;
  }
};
struct MaxOp {
  template <typename M>
  static M apply(M a, M b) {
    return (a < b || is_nan(b)) ? b : a;
  }
};

template <typename T, typename Op>
COHORT_KERNEL_CLONES void pair_loop(T* __restrict out, const T* __restrict a, const T* __restrict b,
                                    size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = store<T>(Op::apply(load(a[i]), load(b[i])));
}

// In-place form: separate so the compiler sees acc and in cannot overlap.
template <typename T, typename Op>
COHORT_KERNEL_CLONES void into_loop(T* __restrict acc, const T* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = store<T>(Op::apply(load(acc[i]), load(in[i])));
}

#if COHORT_WIDE16
// Note [16-bit floats on AVX2]: g++ vectorizes the bit arithmetic of the generic float16 and
// bfloat16 conversions, but they stay compute bound (~25 instructions per 8 float16 elements).
// On CPUs with AVX2 and F16C these loops instead convert 8 elements at a time with
// vcvtph2ps/vcvtps2ph (hardware round to nearest even, subnormals, inf and NaN) and the same bit
// rounding for bfloat16 in fewer instructions, and combine them in float32. Results are
// bit-identical to the generic loops except for NaN payloads (F16C quiets signalling NaNs);
// tests/unit/reduce_kernels_test.cc compares the two on every 16-bit pattern.

// 16 elements as two vectors of 8 floats. Which element sits in which lane does not matter to
// elementwise ops, as long as store() undoes what load() did.
struct Floats16 {
  __m256 lo, hi;
};

template <typename T>
struct Lanes16;

template <>
struct Lanes16<Half> {
  COHORT_AVX2_F16C static Floats16 load(const Half* p) {
    const auto* q = reinterpret_cast<const __m128i*>(p);
    return {_mm256_cvtph_ps(_mm_loadu_si128(q)), _mm256_cvtph_ps(_mm_loadu_si128(q + 1))};
  }
  COHORT_AVX2_F16C static void store(Half* p, Floats16 v) {
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    auto* q = reinterpret_cast<__m128i*>(p);
    _mm_storeu_si128(q, _mm256_cvtps_ph(v.lo, kRound));
    _mm_storeu_si128(q + 1, _mm256_cvtps_ph(v.hi, kRound));
  }
};

template <>
struct Lanes16<BFloat16> {
  // Interleaving zero words below the bf16 words is the shift by 16 of bfloat16_to_float; the
  // in-lane unpacks put elements 0-3, 8-11 in lo and 4-7, 12-15 in hi, and the in-lane pack in
  // store() restores the order.
  COHORT_AVX2_F16C static Floats16 load(const BFloat16* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i zero = _mm256_setzero_si256();
    return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, raw)),
            _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, raw))};
  }
  COHORT_AVX2_F16C static void store(BFloat16* p, Floats16 v) {
    const __m256i packed = _mm256_packus_epi32(round_to_upper(v.lo), round_to_upper(v.hi));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
  }
  // float_to_bfloat16 (dtype.h) on 8 floats, result in the low 16 bits of each lane.
  COHORT_AVX2_F16C static __m256i round_to_upper(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd);
    const __m256i quiet_nan = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet_nan, is_nan), 16);
  }
};

COHORT_AVX2_F16C inline __m256 apply8(SumOp, __m256 a, __m256 b) {
  return _mm256_add_ps(a, b);
}
COHORT_AVX2_F16C inline __m256 apply8(ProductOp, __m256 a, __m256 b) {
  return _mm256_mul_ps(a, b);
}
// NaN-propagating, as the scalar ops (Note [NaN in min/max]).
COHORT_AVX2_F16C inline __m256 apply8(MinOp, __m256 a, __m256 b) {
  const __m256 take_b =
      _mm256_or_ps(_mm256_cmp_ps(b, a, _CMP_LT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  return _mm256_blendv_ps(a, b, take_b);
}
COHORT_AVX2_F16C inline __m256 apply8(MaxOp, __m256 a, __m256 b) {
  const __m256 take_b =
      _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
  return _mm256_blendv_ps(a, b, take_b);
}
struct DivideBy {
  float divisor;
};
COHORT_AVX2_F16C inline __m256 apply8(DivideBy op, __m256 a, __m256) {
  return _mm256_div_ps(a, _mm256_set1_ps(op.divisor));
}

template <typename Op>
COHORT_AVX2_F16C inline Floats16 apply16(Op op, Floats16 a, Floats16 b) {
  return {apply8(op, a.lo, b.lo), apply8(op, a.hi, b.hi)};
}

// out[i] = op(a[i], b[i]) for 16-bit floats. out may equal a or b: each block is loaded before
// it is stored.
template <typename T, typename Op>
COHORT_AVX2_F16C void wide16_loop(T* out, const T* a, const T* b, size_t n, Op op) {
  constexpr size_t kBlock = 16;
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    Lanes16<T>::store(out + i, apply16(op, Lanes16<T>::load(a + i), Lanes16<T>::load(b + i)));
  }
  if (i == n) return;
  // The tail goes through the same instructions, so every element rounds the same way.
  T x[kBlock] = {}, y[kBlock] = {}, z[kBlock];
  std::memcpy(x, a + i, (n - i) * sizeof(T));
  std::memcpy(y, b + i, (n - i) * sizeof(T));
  Lanes16<T>::store(z, apply16(op, Lanes16<T>::load(x), Lanes16<T>::load(y)));
  std::memcpy(out + i, z, (n - i) * sizeof(T));
}

bool cpu_has_avx2_f16c() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}
#endif  // COHORT_WIDE16

template <typename T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// data[i] = op(data[i], data[i]): rare (reduce_into(x, x)), so left to the compiler as is.
template <typename T, typename Op>
void self_loop(T* data, size_t n) {
  for (size_t i = 0; i < n; ++i) data[i] = store<T>(Op::apply(load(data[i]), load(data[i])));
}

template <typename T, typename Op>
void dispatch_pair(void* out, const void* a, const void* b, size_t n, bool wide) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
#if COHORT_WIDE16
  if constexpr (kIs16BitFloat<T>) {
    if (wide && cpu_has_avx2_f16c()) return wide16_loop(o, x, y, n, Op{});
  }
#endif
  // Every op is commutative, so out == b is the in-place form too (up to which NaN payload
  // survives a min/max of two NaNs). All three equal cannot go through __restrict pointers.
  if (o == x && o == y) return self_loop<T, Op>(o, n);
  if (o == x) return into_loop<T, Op>(o, y, n);
  if (o == y) return into_loop<T, Op>(o, x, n);
  pair_loop<T, Op>(o, x, y, n);
}

// One element of divide(): v / divisor in T, as one process averaging would compute it.
template <typename T>
inline T divided(T v, int divisor) {
  using M = typename Math<T>::type;
  if constexpr (std::is_floating_point_v<M>) {
    // Divide rather than multiply by the reciprocal: the result is then identical to one
    // process summing and dividing, which parity tests compare against.
    return store<T>(load(v) / static_cast<M>(divisor));
  } else if constexpr (sizeof(T) <= sizeof(int32_t)) {
    // SIMD has no integer division, but double division truncated toward zero is exact here:
    // when a/d is not an integer it lies at least 1/d from the next integer, more than its
    // rounding error |a/d| * 2^-53 for any |a| < 2^53. The divisor is converted as an int, not
    // as T (256 would become 0 in uint8).
    return static_cast<T>(static_cast<double>(v) / static_cast<double>(divisor));
  } else {
    // int64 does not fit a double's mantissa: plain (scalar) integer division.
    return static_cast<T>(v / static_cast<int64_t>(divisor));
  }
}

// x[i] = y[i] = op(x[i], y[i]), then divided (kAvg's last step) when kDivide: the two-rank
// in-place allreduce, which stores each result into both ranks' buffers in one pass.
template <typename T, typename Op, bool kDivide>
COHORT_KERNEL_CLONES void both_loop(T* __restrict x, T* __restrict y, size_t n, int divisor) {
  for (size_t i = 0; i < n; ++i) {
    T v = store<T>(Op::apply(load(x[i]), load(y[i])));
    if constexpr (kDivide) v = divided(v, divisor);
    x[i] = v;
    y[i] = v;
  }
}

template <typename T, typename Op>
void dispatch_both(T* x, T* y, size_t n, int divisor, bool wide) {
#if COHORT_WIDE16
  if constexpr (kIs16BitFloat<T>) {
    if (wide && cpu_has_avx2_f16c()) {
      // The AVX2 loops a chunk at a time (still in L1 when it is copied to y), so that every
      // element rounds as reduce_pair and divide round it.
      constexpr size_t kChunk = 2048;
      for (size_t i = 0; i < n; i += kChunk) {
        const size_t length = std::min(kChunk, n - i);
        wide16_loop(x + i, x + i, y + i, length, Op{});
        if (divisor > 1) {
          wide16_loop(x + i, x + i, x + i, length, DivideBy{static_cast<float>(divisor)});
        }
        copy(y + i, x + i, length * sizeof(T));
      }
      return;
    }
  }
#endif
  if (divisor > 1) return both_loop<T, Op, true>(x, y, n, divisor);
  both_loop<T, Op, false>(x, y, n, divisor);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<T>{}) with the element type of dtype.
template <typename F>
void with_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(TypeTag<float>{});
    case DType::kFloat64: return f(TypeTag<double>{});
    case DType::kFloat16: return f(TypeTag<Half>{});
    case DType::kBFloat16: return f(TypeTag<BFloat16>{});
    case DType::kInt8: return f(TypeTag<int8_t>{});
    case DType::kUInt8: return f(TypeTag<uint8_t>{});
    case DType::kInt32: return f(TypeTag<int32_t>{});
    case DType::kInt64: return f(TypeTag<int64_t>{});
  }
  COHORT_INTERNAL_ASSERT(false, "unhandled dtype ", static_cast<int>(dtype));
}

// f(TypeTag<T>{}, Op{}) with the element type of dtype and the op that combines for op.
template <typename F>
void with_types(DType dtype, ReduceOp op, F&& f) {
  with_dtype(dtype, [&](auto type) {
    switch (combine_op(op)) {
      case ReduceOp::kSum: return f(type, SumOp{});
      case ReduceOp::kProduct: return f(type, ProductOp{});
      case ReduceOp::kMin: return f(type, MinOp{});
      case ReduceOp::kMax: return f(type, MaxOp{});
      case ReduceOp::kAvg: break;
    }
    COHORT_INTERNAL_ASSERT(false, "unhandled reduce op ", reduce_op_name(op));
  });
}

// True when [p, p + bytes) and [q, q + bytes) overlap without being the same range.
bool partially_overlap(const void* p, const void* q, size_t bytes) {
  return p != q && ranges_overlap(p, bytes, q, bytes);
}

template <typename T>
COHORT_KERNEL_CLONES void divide_loop(T* __restrict data, size_t n, int divisor) {
  for (size_t i = 0; i < n; ++i) data[i] = divided(data[i], divisor);
}

template <typename T>
void divide_typed(T* data, size_t n, int divisor, bool wide) {
#if COHORT_WIDE16
  if constexpr (kIs16BitFloat<T>) {
    if (wide && cpu_has_avx2_f16c()) {
      return wide16_loop(data, data, data, n, DivideBy{static_cast<float>(divisor)});
    }
  }
#endif
  divide_loop(data, n, divisor);
}

void reduce_pair_impl(void* out, const void* a, const void* b, size_t count, DType dtype,
                      ReduceOp op, bool wide) {
  if (count == 0) return;
  const size_t bytes = count * dtype_size(dtype);
  COHORT_INTERNAL_ASSERT(!partially_overlap(out, a, bytes) && !partially_overlap(out, b, bytes),
                         "reduce_pair: out must be a, b or a separate buffer");
  with_types(dtype, op, [&](auto type, auto combine) {
    using T = typename decltype(type)::type;
    dispatch_pair<T, decltype(combine)>(out, a, b, count, wide);
  });
}

void reduce_pair_into_both_impl(void* a, void* b, size_t count, DType dtype, ReduceOp op, int world,
                                bool wide) {
  if (count == 0) return;
  COHORT_CHECK(world > 0, "reduce_pair_into_both: the world size must be positive, got ", world);
  const size_t bytes = count * dtype_size(dtype);
  COHORT_INTERNAL_ASSERT(!ranges_overlap(a, bytes, b, bytes),
                         "reduce_pair_into_both: a and b must not overlap");
  const int divisor = op == ReduceOp::kAvg ? world : 1;
  with_types(dtype, op, [&](auto type, auto combine) {
    using T = typename decltype(type)::type;
    dispatch_both<T, decltype(combine)>(static_cast<T*>(a), static_cast<T*>(b), count, divisor,
                                        wide);
  });
}

void divide_impl(void* data, size_t count, DType dtype, int divisor, bool wide) {
  COHORT_CHECK(divisor > 0, "divide: the divisor (a group size) must be positive, got ", divisor);
  if (count == 0 || divisor == 1) return;
  with_dtype(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    divide_typed(static_cast<T*>(data), count, divisor, wide);
  });
}

}  // namespace

void reduce_pair(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  reduce_pair_impl(out, a, b, count, dtype, op, true);
}

void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op) {
  reduce_pair_impl(acc, acc, in, count, dtype, op, true);
}

void divide(void* data, size_t count, DType dtype, int divisor) {
  divide_impl(data, count, dtype, divisor, true);
}

void reduce_pair_into_both(void* a, void* b, size_t count, DType dtype, ReduceOp op, int world) {
  reduce_pair_into_both_impl(a, b, count, dtype, op, world, true);
}

namespace detail {

void reduce_pair_generic(void* out, const void* a, const void* b, size_t count, DType dtype,
                         ReduceOp op) {
  reduce_pair_impl(out, a, b, count, dtype, op, false);
}

void divide_generic(void* data, size_t count, DType dtype, int divisor) {
  divide_impl(data, count, dtype, divisor, false);
}

void reduce_pair_into_both_generic(void* a, void* b, size_t count, DType dtype, ReduceOp op,
                                   int world) {
  reduce_pair_into_both_impl(a, b, count, dtype, op, world, false);
}

}  // namespace detail

}  // namespace cohort::kernels
