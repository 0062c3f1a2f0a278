#include "cohort/core/dtype.h"

#include <algorithm>
#include <cctype>

#include "cohort/core/check.h"

namespace cohort {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt8: return 1;
    case DType::kUInt8: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  COHORT_INTERNAL_ASSERT(false, "unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kFloat16: return "float16";
    case DType::kBFloat16: return "bfloat16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown-dtype";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
  }
  return "unknown-op";
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}
}  // namespace

DType parse_dtype(const std::string& name) {
  const std::string n = lower(name);
  if (n == "float32" || n == "float" || n == "fp32" || n == "f32") return DType::kFloat32;
  if (n == "float64" || n == "double" || n == "fp64" || n == "f64") return DType::kFloat64;
  if (n == "float16" || n == "half" || n == "fp16" || n == "f16") return DType::kFloat16;
  if (n == "bfloat16" || n == "bf16") return DType::kBFloat16;
  if (n == "int8" || n == "i8") return DType::kInt8;
  if (n == "uint8" || n == "u8") return DType::kUInt8;
  if (n == "int32" || n == "int" || n == "i32") return DType::kInt32;
  if (n == "int64" || n == "long" || n == "i64") return DType::kInt64;
  throw InvalidArgument("unknown dtype '" + name +
                        "': use float32, float64, float16, bfloat16, int8, uint8, int32 or int64");
}

ReduceOp parse_reduce_op(const std::string& name) {
  const std::string n = lower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg" || n == "mean") return ReduceOp::kAvg;
  if (n == "min") return ReduceOp::kMin;
  if (n == "max") return ReduceOp::kMax;
  if (n == "product" || n == "prod") return ReduceOp::kProduct;
  throw InvalidArgument("unknown reduce op '" + name + "': use sum, avg, min, max or product");
}

// Half conversions without branches on the value so that loops over them vectorize.
// Note [Half conversion]: the float is rescaled so that the hardware does the rounding: a
// multiply by 2^-112 moves the float exponent range onto the half one, and subnormals come out
// of the same arithmetic (the magic-number method described by F. Giesen).
float half_to_float(Half v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t rest = (h & 0x7fffu) << 13;  // exponent+mantissa in float position
  float f;
  uint32_t u = rest;
  std::memcpy(&f, &u, sizeof f);
  f *= 5.192296858534828e+33f;  // 2^112: rebias exponent (also normalizes subnormals)
  std::memcpy(&u, &f, sizeof u);
  // Inf/NaN: exponent all ones in half -> all ones in float.
  const uint32_t is_inf_nan = static_cast<uint32_t>((h & 0x7c00u) == 0x7c00u);
  u = is_inf_nan ? (rest | 0x7f800000u) : u;
  u |= sign;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

Half float_to_half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  float a;
  std::memcpy(&a, &abs_bits, sizeof a);
  uint16_t out;
  if (abs_bits > 0x7f800000u) {
    out = 0x7e00u;  // NaN
  } else if (abs_bits >= 0x477ff000u) {
    out = 0x7c00u;  // overflow (also +inf): values >= 65520 round to inf
  } else if (abs_bits < 0x38800000u) {
    // Subnormal or zero: add 0.5 so the FPU rounds the mantissa into the low bits.
    float r = a + 0.5f;
    uint32_t ru;
    std::memcpy(&ru, &r, sizeof ru);
    out = static_cast<uint16_t>(ru - 0x3f000000u);
  } else {
    // Normal: rebias exponent (127 -> 15) and round to nearest even on the 13 dropped bits.
    const uint32_t mant_odd = (abs_bits >> 13) & 1u;
    uint32_t r = abs_bits + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd;
    out = static_cast<uint16_t>(r >> 13);
  }
  return Half{static_cast<uint16_t>(out | sign)};
}

}  // namespace cohort
