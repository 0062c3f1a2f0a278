// Element types and reduce operations that collectives understand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace cohort {

enum class DType : uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
inline constexpr int kNumDTypes = 8;

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax, kProduct };
inline constexpr int kNumReduceOps = 5;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* reduce_op_name(ReduceOp op);
// Parses "float32", "fp32", "f32", ... and "sum", "avg", ...; throws InvalidArgument otherwise.
DType parse_dtype(const std::string& name);
ReduceOp parse_reduce_op(const std::string& name);
bool is_floating(DType dtype);

// IEEE 754 half precision, stored as bits. Arithmetic happens in float (see reduce kernels).
struct Half {
  uint16_t bits = 0;
};
// bfloat16: the upper half of a float32.
struct BFloat16 {
  uint16_t bits = 0;
};

// Conversions are inline and branch-free (selects, no branches on the value) so that the
// reduce kernels' loops over them vectorize. They round to nearest even and do no arithmetic
// whose result depends on float32 subnormals, so flush-to-zero / denormals-are-zero modes (which
// training code often turns on) do not change them.
namespace detail {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// `condition ? x : y` as mask arithmetic. A plain ?: lets g++ move the float arithmetic of the
// unused arm into a branch, which it then may not if-convert (the arithmetic could trap), and
// the loop stays scalar.
inline uint32_t select_bits(bool condition, uint32_t x, uint32_t y) {
  const uint32_t mask = 0u - static_cast<uint32_t>(condition);
  return (x & mask) | (y & ~mask);
}
}  // namespace detail

inline float bfloat16_to_float(BFloat16 v) {
  return detail::bits_float(static_cast<uint32_t>(v.bits) << 16);
}

inline BFloat16 float_to_bfloat16(float f) {
  const uint32_t u = detail::float_bits(f);
  // Round to nearest even on the 16 dropped bits; a carry rolls into the exponent (up to inf).
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  // NaN: keep sign and payload and set the quiet bit (a payload only in the dropped bits would
  // round to inf). Tested on the bits, not as f != f, which -ffinite-math-only folds to false in
  // the programs that include this header.
  const bool is_nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t out = detail::select_bits(is_nan, u | 0x00400000u, rounded);
  return BFloat16{static_cast<uint16_t>(out >> 16)};
}

// Note [Half conversion]: half has 5 exponent bits (bias 15) and 10 mantissa bits.
//  - half -> float: normal values only need the exponent rebiased (+112). A subnormal m * 2^-24
//    is built as the normal float 2^-14 * (1 + m/1024) minus 2^-14, which is exact.
//  - float -> half: for |f| >= 2^-14 the exponent is rebiased and the 13 dropped mantissa bits
//    are rounded to nearest even by integer addition; a carry into the exponent is the correct
//    rounding, and everything from 65520 up (the midpoint above 65504, whose even neighbour is
//    inf) lands at or past 0x7c00 and is clamped to inf. For |f| < 2^-14 the float adder does the
//    rounding: ulp(0.5f) == 2^-24 is exactly the half subnormal step, so the mantissa of
//    |f| + 0.5f holds the rounded subnormal (1024 there is the smallest normal, also correct).
inline float half_to_float(Half v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = h & 0x7c00u;
  const uint32_t rest = (h & 0x7fffu) << 13;  // exponent and mantissa in float position
  const uint32_t normal = rest + 0x38000000u;
  const uint32_t inf_nan = rest | 0x7f800000u;
  const float kMinNormal = 6.103515625e-05f;  // 2^-14
  const uint32_t subnormal =
      detail::float_bits(detail::bits_float(rest + 0x38800000u) - kMinNormal);
  uint32_t out = detail::select_bits(exponent == 0, subnormal, normal);
  out = detail::select_bits(exponent == 0x7c00u, inf_nan, out);
  return detail::bits_float(out | sign);
}

inline Half float_to_half(float f) {
  const uint32_t u = detail::float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t mantissa_odd = (a >> 13) & 1u;
  uint32_t normal = (a - 0x38000000u + 0xfffu + mantissa_odd) >> 13;
  normal = normal < 0x7c00u ? normal : 0x7c00u;
  const uint32_t subnormal = detail::float_bits(detail::bits_float(a) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);  // quiet, payload kept
  uint32_t out = detail::select_bits(a < 0x38800000u, subnormal, normal);
  out = detail::select_bits(a > 0x7f800000u, nan, out);
  return Half{static_cast<uint16_t>(out | sign)};
}

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBFloat16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace cohort
