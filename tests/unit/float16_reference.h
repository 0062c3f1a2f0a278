// Slow reference conversions for float16 and bfloat16, written from the IEEE 754 definition
// (the nearest representable value, ties to the even mantissa, overflow past the midpoint above
// the largest finite value to inf) and sharing no code with cohort/core/dtype.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace cohort::testing::reference {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// ---- float16 reference

// The exact value of a non-negative finite half (bits < 0x7c00); 0x7c00 maps to 65536, the
// value the next binade would start at, which is where rounding to inf begins.
inline double half_magnitude(uint16_t bits) {
  const int exponent = bits >> 10;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return std::ldexp(mantissa, -24);
  return std::ldexp(1024 + mantissa, exponent - 25);
}

inline bool half_is_nan(uint16_t bits) {
  return (bits & 0x7c00) == 0x7c00 && (bits & 0x3ff) != 0;
}

// The value of any half, as a double (exact).
inline double reference_half_to_double(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const uint16_t magnitude = bits & 0x7fff;
  if (half_is_nan(bits)) return std::numeric_limits<double>::quiet_NaN();
  if (magnitude == 0x7c00) return sign * std::numeric_limits<double>::infinity();
  return sign * half_magnitude(magnitude);
}

// All non-negative halves in increasing order of value (index == bits), plus 65536 at 0x7c00.
inline const std::vector<double>& half_ladder() {
  static const std::vector<double> ladder = [] {
    std::vector<double> out(0x7c01);
    for (uint32_t b = 0; b <= 0x7c00; ++b) out[b] = half_magnitude(static_cast<uint16_t>(b));
    return out;
  }();
  return ladder;
}

// Round to nearest, ties to the even mantissa; past the ladder is inf. Comparing against the
// midpoint of two neighbours is exact in double (the midpoint has 12 significant bits).
// Returns bits with sign; for NaN any NaN pattern (callers check half_is_nan).
inline uint16_t reference_float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  const auto& ladder = half_ladder();
  const auto it = std::lower_bound(ladder.begin(), ladder.end(), a);
  if (it == ladder.end()) return static_cast<uint16_t>(sign | 0x7c00);
  const auto hi = static_cast<uint16_t>(it - ladder.begin());
  if (*it == a || hi == 0) return static_cast<uint16_t>(sign | hi);
  const uint16_t lo = hi - 1;
  const double mid = (ladder[lo] + ladder[hi]) / 2;
  uint16_t pick;
  if (a < mid) {
    pick = lo;
  } else if (a > mid) {
    pick = hi;
  } else {
    pick = (lo & 1) ? hi : lo;
  }
  return static_cast<uint16_t>(sign | pick);
}

inline double bfloat16_magnitude(uint32_t upper) {  // upper: bits 15..0 of a non-negative bf16
  return static_cast<double>(float_of(upper << 16));
}

// Candidates are the truncation toward zero and the next bf16 up (2^128 for the one above the
// largest finite); the midpoint of the two is exact in double.
inline uint16_t reference_float_to_bfloat16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t u = bits_of(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  const uint32_t lo = (u & 0x7fffffffu) >> 16;
  if (lo == 0x7f80) return static_cast<uint16_t>(sign | 0x7f80);  // inf
  const double a = std::fabs(static_cast<double>(f));
  const double lo_value = bfloat16_magnitude(lo);
  const double hi_value = lo == 0x7f7f ? std::ldexp(1.0, 128) : bfloat16_magnitude(lo + 1);
  if (a == lo_value) return static_cast<uint16_t>(sign | lo);
  const double mid = (lo_value + hi_value) / 2;
  uint32_t pick;
  if (a < mid) {
    pick = lo;
  } else if (a > mid) {
    pick = lo + 1;
  } else {
    pick = (lo & 1) ? lo + 1 : lo;
  }
  return static_cast<uint16_t>(sign | pick);
}

inline bool bfloat16_is_nan(uint16_t bits) {
  return (bits & 0x7f80) == 0x7f80 && (bits & 0x7f) != 0;
}

}  // namespace cohort::testing::reference
