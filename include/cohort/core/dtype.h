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

// Branch-free conversions so that loops over them vectorize.
inline float bfloat16_to_float(BFloat16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline BFloat16 float_to_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  // Round to nearest even; NaN stays NaN because its mantissa keeps a high bit set.
  const uint32_t is_nan = static_cast<uint32_t>((u & 0x7fffffffu) > 0x7f800000u);
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  const uint32_t out = is_nan ? (u | 0x00400000u) : rounded;
  return BFloat16{static_cast<uint16_t>(out >> 16)};
}
float half_to_float(Half v);
Half float_to_half(float f);

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
