#include "values.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace cohort::bench {

namespace {

// Calls fn with a value of the C++ type that holds `dtype`, so loops run on typed pointers.
template <typename Fn>
void with_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(Half{});
    case DType::kBFloat16: return fn(BFloat16{});
    case DType::kInt8: return fn(int8_t{});
    case DType::kUInt8: return fn(uint8_t{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kInt64: return fn(int64_t{});
  }
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, Half>) return float_to_half(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, BFloat16>) return float_to_bfloat16(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, Half>) return half_to_float(v);
  else if constexpr (std::is_same_v<T, BFloat16>) return bfloat16_to_float(v);
  else return static_cast<double>(v);
}

// A well-mixed hash of (a, b): neighbouring ranks and indices get unrelated values.
uint32_t mix(uint32_t a, uint32_t b) {
  uint32_t x = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA77u;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  x *= 0x297A2D39u;
  x ^= x >> 15;
  return x;
}

Pattern exact_pattern() {
  Pattern p;
  p.values.assign(kPeriod, 0.0);
  p.tolerance.assign(kPeriod, 0.0);
  return p;
}

// Relative error of one rounding to `dtype`, doubled to cover the float step before it.
double relative_rounding(DType dtype) {
  switch (dtype) {
    case DType::kFloat16: return std::ldexp(1.0, -10);
    case DType::kBFloat16: return std::ldexp(1.0, -7);
    case DType::kFloat32: return std::ldexp(1.0, -23);
    case DType::kFloat64: return std::ldexp(1.0, -52);
    default: return 0.0;
  }
}

double combine(ReduceOp op, double acc, double v) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return acc + v;
    case ReduceOp::kProduct: return acc * v;
    case ReduceOp::kMin: return std::min(acc, v);
    case ReduceOp::kMax: return std::max(acc, v);
  }
  return acc;
}

// Sums: a part shared by all ranks that varies along the buffer, so that results vary too
// (an average of many independent values would be nearly constant and check little), plus a
// part of each rank's own, so that a lost contribution shows. Values are at most
// exact / ranks, so every sum is exact.
Pattern sum_input(DType dtype, int ranks, int rank) {
  const uint32_t most = static_cast<uint32_t>(
      std::clamp(std::floor(largest_exact_integer(dtype) / ranks), 1.0, 8.0));
  const uint32_t shared = (most + 1) / 2;
  const uint32_t own = most - shared + 1;
  Pattern p = exact_pattern();
  for (size_t j = 0; j < kPeriod; ++j) {
    const uint32_t index = static_cast<uint32_t>(j);
    p.values[j] = 1.0 + mix(0xFFFFFFFFu, index) % shared +
                  mix(static_cast<uint32_t>(rank), index) % own;
  }
  return p;
}

// Min/max: a shared part plus (rank + j) % k, which is 0 on one rank and largest on another,
// a different pair for each j: those ranks decide the result, so every rank is tested.
Pattern extreme_input(DType dtype, int ranks, int rank) {
  const double exact = largest_exact_integer(dtype);
  const uint32_t k = static_cast<uint32_t>(std::min<double>(ranks, exact - 1));
  const uint32_t shared = static_cast<uint32_t>(std::clamp(exact - k, 1.0, 64.0));
  Pattern p = exact_pattern();
  for (size_t j = 0; j < kPeriod; ++j) {
    const uint32_t index = static_cast<uint32_t>(j);
    p.values[j] = 1.0 + mix(0xFFFFFFFFu, index) % shared +
                  (static_cast<uint32_t>(rank) + index) % k;
  }
  return p;
}

// Products: factors 2 on at most `bits` of the ranks per element keep the product exact.
Pattern product_input(DType dtype, int ranks, int rank) {
  const int bits =
      std::max(1, static_cast<int>(std::floor(std::log2(largest_exact_integer(dtype)))));
  const size_t stride = static_cast<size_t>(std::max(2, (ranks + bits - 1) / bits));
  Pattern p = exact_pattern();
  for (size_t j = 0; j < kPeriod; ++j) {
    p.values[j] = (static_cast<size_t>(rank) + j) % stride == 0 ? 2 : 1;
  }
  return p;
}

}  // namespace

double largest_exact_integer(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 16777216.0;  // 2^24
    case DType::kFloat64: return 9007199254740992.0;  // 2^53
    case DType::kFloat16: return 2048.0;
    case DType::kBFloat16: return 256.0;
    case DType::kInt8: return 127.0;
    case DType::kUInt8: return 255.0;
    case DType::kInt32: return 2147483647.0;
    case DType::kInt64: return 9007199254740992.0;  // checked through double
  }
  return 0.0;
}

Pattern reduce_input(DType dtype, ReduceOp op, int ranks, int rank) {
  switch (op) {
    case ReduceOp::kProduct: return product_input(dtype, ranks, rank);
    case ReduceOp::kMin:
    case ReduceOp::kMax: return extreme_input(dtype, ranks, rank);
    case ReduceOp::kSum:
    case ReduceOp::kAvg: break;
  }
  return sum_input(dtype, ranks, rank);
}

Pattern reduce_result(DType dtype, ReduceOp op, int ranks) {
  Pattern out = reduce_input(dtype, op, ranks, 0);
  for (int r = 1; r < ranks; ++r) {
    const Pattern in = reduce_input(dtype, op, ranks, r);
    for (size_t j = 0; j < kPeriod; ++j) out.values[j] = combine(op, out.values[j], in.values[j]);
  }
  if (op != ReduceOp::kAvg) return out;
  for (size_t j = 0; j < kPeriod; ++j) {
    const double mean = out.values[j] / ranks;
    // Integer averages truncate (the sum is exact and positive); floating ones round once.
    out.values[j] = is_floating(dtype) ? mean : std::trunc(mean);
    out.tolerance[j] = relative_rounding(dtype) * mean;
  }
  return out;
}

Pattern plain_input(DType dtype, int rank) {
  const uint32_t range = static_cast<uint32_t>(std::min(largest_exact_integer(dtype), 65535.0));
  Pattern p = exact_pattern();
  for (size_t j = 0; j < kPeriod; ++j) {
    // A different hash seed than reduce_input, so the two kinds never look alike by accident.
    const uint32_t h = mix(static_cast<uint32_t>(rank) ^ 0x5BD1E995u, static_cast<uint32_t>(j));
    p.values[j] = 1.0 + static_cast<double>(h % range);
  }
  return p;
}

void fill(void* data, size_t count, DType dtype, const Pattern& pattern, size_t offset) {
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    T table[kPeriod];
    for (size_t j = 0; j < kPeriod; ++j) table[j] = from_double<T>(pattern.values[j]);
    T* out = static_cast<T*>(data);
    size_t j = offset % kPeriod;
    for (size_t i = 0; i < count; ++i) {
      out[i] = table[j];
      if (++j == kPeriod) j = 0;
    }
  });
}

uint64_t count_wrong(const void* data, size_t count, DType dtype, const Pattern& expected,
                     size_t offset) {
  uint64_t wrong = 0;
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(data);
    size_t j = offset % kPeriod;
    for (size_t i = 0; i < count; ++i) {
      // Written so that a NaN counts as wrong.
      if (!(std::fabs(to_double(in[i]) - expected.values[j]) <= expected.tolerance[j])) ++wrong;
      if (++j == kPeriod) j = 0;
    }
  });
  return wrong;
}

}  // namespace cohort::bench
