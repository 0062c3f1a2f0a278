// float16 / bfloat16 conversions against slow references written from the IEEE 754 definition
// (nearest representable value, ties to even mantissa), plus dtype names and parsing.
#include "cohort/core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cohort/core/error.h"
#include "float16_reference.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace cohort {
namespace {

using namespace testing::reference;  // NOLINT: the references are what this file tests against

void expect_half_matches(float f) {
  const uint16_t got = float_to_half(f).bits;
  const uint16_t want = reference_float_to_half(f);
  if (std::isnan(f)) {
    EXPECT_TRUE(half_is_nan(got)) << "float bits 0x" << std::hex << bits_of(f) << " -> 0x" << got;
    EXPECT_EQ(got & 0x8000, std::signbit(f) ? 0x8000 : 0)
        << "NaN sign, float 0x" << std::hex << bits_of(f);
    return;
  }
  EXPECT_EQ(got, want) << "float " << f << " (bits 0x" << std::hex << bits_of(f) << ")";
}

// Floats on and around every midpoint between neighbouring halves (the ties), both signs.
std::vector<float> half_tie_floats() {
  std::vector<float> out;
  const auto& ladder = half_ladder();
  for (size_t b = 0; b + 1 < ladder.size(); ++b) {
    const float mid = static_cast<float>((ladder[b] + ladder[b + 1]) / 2);  // exact in float
    for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
      out.push_back(f);
      out.push_back(-f);
    }
  }
  return out;
}

// Floats with random bits, and random floats spread over the half range by exponent.
std::vector<float> random_floats(uint32_t seed, size_t n) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(float_of(static_cast<uint32_t>(rng())));
    std::uniform_int_distribution<int> exponent(-40, 20);
    const float m = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng);
    out.push_back((rng() & 1 ? -1.0f : 1.0f) * std::ldexp(m, exponent(rng)));
  }
  return out;
}

std::vector<float> special_floats() {
  const float inf = std::numeric_limits<float>::infinity();
  return {0.0f,
          -0.0f,
          inf,
          -inf,
          std::numeric_limits<float>::quiet_NaN(),
          -std::numeric_limits<float>::quiet_NaN(),
          float_of(0x7f800001u),  // signalling NaN with only the lowest payload bit
          float_of(0xffffffffu),
          float_of(0x7fc00000u),
          std::numeric_limits<float>::denorm_min(),
          -std::numeric_limits<float>::denorm_min(),
          std::numeric_limits<float>::min(),
          std::numeric_limits<float>::max(),
          -std::numeric_limits<float>::max(),
          65504.0f,
          65519.996f,
          65520.0f,
          -65520.0f,
          65536.0f,
          1e10f,
          std::ldexp(1.0f, -14),  // smallest normal half
          std::ldexp(1.0f, -24),  // smallest subnormal half
          std::ldexp(1.0f, -25),  // half of it: ties to 0
          std::ldexp(1.5f, -25),  // rounds up to the smallest subnormal
          std::ldexp(1.0f, -26),
          std::ldexp(1023.5f, -24),  // between the largest subnormal and the smallest normal
          1.0f,
          1.0f + std::ldexp(1.0f, -11),  // tie between 1 and 1 + 2^-10: to 1
          1.0f + 3 * std::ldexp(1.0f, -11),
          0.1f,
          -2.5f,
          3.14159265f};
}

TEST(HalfTest, EveryHalfConvertsToItsExactValue) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = half_to_float(Half{bits});
    if (half_is_nan(bits)) {
      EXPECT_TRUE(std::isnan(f)) << "half 0x" << std::hex << b;
      EXPECT_EQ(std::signbit(f), (b & 0x8000) != 0) << "half 0x" << std::hex << b;
      continue;
    }
    EXPECT_EQ(static_cast<double>(f), reference_half_to_double(bits)) << "half 0x" << std::hex << b;
    EXPECT_EQ(std::signbit(f), (b & 0x8000) != 0) << "half 0x" << std::hex << b;
  }
}

TEST(HalfTest, EveryHalfRoundTripsExactlyAndNaNStaysNaN) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const uint16_t back = float_to_half(half_to_float(Half{bits})).bits;
    if (half_is_nan(bits)) {
      EXPECT_TRUE(half_is_nan(back)) << "half 0x" << std::hex << b << " -> 0x" << back;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << "half 0x" << std::hex << b;
    } else {
      EXPECT_EQ(back, bits) << "half 0x" << std::hex << b;
    }
  }
}

TEST(HalfTest, RoundsTiesToEvenAtEveryMidpoint) {
  for (const float f : half_tie_floats()) expect_half_matches(f);
}

TEST(HalfTest, MatchesReferenceOnRandomAndSpecialFloats) {
  for (const float f : special_floats()) expect_half_matches(f);
  for (const float f : random_floats(1234, 100000)) expect_half_matches(f);
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(float_to_half(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f).bits, 0xc000);
  EXPECT_EQ(float_to_half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f).bits, 0x7c00);  // the tie above the largest half: inf
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_EQ(float_to_half(-0.0f).bits, 0x8000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)).bits, 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)).bits, 0x0000);
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)).bits, 0x0400);
  EXPECT_EQ(half_to_float(Half{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(Half{0x3555}), 0.333251953125f);
}

#if defined(__SSE__)
// Training code often sets flush-to-zero / denormals-are-zero; the conversions must not care.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }  // FTZ | DAZ
  ~FlushDenormalsScope() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};

TEST(HalfTest, UnaffectedByFlushToZeroMode) {
  FlushDenormalsScope scope;
  for (uint32_t b = 0; b < 0x7c00; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    EXPECT_EQ(static_cast<double>(half_to_float(Half{bits})), half_magnitude(bits))
        << "half 0x" << std::hex << b;
    EXPECT_EQ(float_to_half(half_to_float(Half{bits})).bits, bits) << "half 0x" << std::hex << b;
  }
  for (const float f : half_tie_floats()) {
    // Float subnormals read as zero in this mode (they round to zero anyway); skip them by
    // their bits, since a float comparison would see zero too.
    const uint32_t u = bits_of(f);
    if ((u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0) continue;
    expect_half_matches(f);
  }
}
#endif

// ---- bfloat16

void expect_bfloat16_matches(float f) {
  const uint16_t got = float_to_bfloat16(f).bits;
  if (std::isnan(f)) {
    EXPECT_TRUE(bfloat16_is_nan(got)) << "float 0x" << std::hex << bits_of(f) << " -> 0x" << got;
    EXPECT_EQ(got & 0x8000, std::signbit(f) ? 0x8000 : 0) << "float 0x" << std::hex << bits_of(f);
    return;
  }
  EXPECT_EQ(got, reference_float_to_bfloat16(f))
      << "float " << f << " (bits 0x" << std::hex << bits_of(f) << ")";
}

TEST(BFloat16Test, EveryBFloat16RoundTripsExactlyAndNaNStaysNaN) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    const float f = bfloat16_to_float(BFloat16{bits});
    EXPECT_EQ(bits_of(f), b << 16);
    const uint16_t back = float_to_bfloat16(f).bits;
    if (bfloat16_is_nan(bits)) {
      EXPECT_TRUE(bfloat16_is_nan(back)) << "bf16 0x" << std::hex << b << " -> 0x" << back;
    } else {
      EXPECT_EQ(back, bits) << "bf16 0x" << std::hex << b;
    }
  }
}

TEST(BFloat16Test, RoundsTiesToEvenAtEveryMidpointOfSomeBinades) {
  // Every midpoint in a few binades (normal, subnormal, the top one), and around each.
  for (const uint32_t binade : {0x0000u, 0x0080u, 0x3f80u, 0x7f00u}) {
    for (uint32_t m = 0; m < 0x80; ++m) {
      const float mid = float_of(((binade | m) << 16) | 0x8000u);
      for (const float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e38f)}) {
        expect_bfloat16_matches(f);
        expect_bfloat16_matches(-f);
      }
    }
  }
}

TEST(BFloat16Test, MatchesReferenceOnRandomAndSpecialFloats) {
  for (const float f : special_floats()) expect_bfloat16_matches(f);
  for (const float f : random_floats(99, 100000)) expect_bfloat16_matches(f);
}

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(float_to_bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float_to_bfloat16(float_of(0x3f808000u)).bits, 0x3f80);              // tie, even stays
  EXPECT_EQ(float_to_bfloat16(float_of(0x3f818000u)).bits, 0x3f82);              // tie, odd goes up
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // to inf
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  // A NaN whose payload lies only in the dropped bits must not become inf.
  EXPECT_TRUE(bfloat16_is_nan(float_to_bfloat16(float_of(0x7f800001u)).bits));
  EXPECT_TRUE(bfloat16_is_nan(float_to_bfloat16(float_of(0xffffffffu)).bits));
}

// ---- names and parsing

TEST(DTypeTest, SizesAndNames) {
  const struct {
    DType dtype;
    size_t size;
    const char* name;
    bool floating;
  } kCases[] = {{DType::kFloat32, 4, "float32", true}, {DType::kFloat64, 8, "float64", true},
                {DType::kFloat16, 2, "float16", true}, {DType::kBFloat16, 2, "bfloat16", true},
                {DType::kInt8, 1, "int8", false},      {DType::kUInt8, 1, "uint8", false},
                {DType::kInt32, 4, "int32", false},    {DType::kInt64, 8, "int64", false}};
  static_assert(sizeof(kCases) / sizeof(kCases[0]) == kNumDTypes);
  for (const auto& c : kCases) {
    EXPECT_EQ(dtype_size(c.dtype), c.size) << c.name;
    EXPECT_STREQ(dtype_name(c.dtype), c.name);
    EXPECT_EQ(is_floating(c.dtype), c.floating) << c.name;
    EXPECT_EQ(parse_dtype(c.name), c.dtype);
  }
  EXPECT_EQ(dtype_size(dtype_of<Half>), sizeof(Half));
  EXPECT_EQ(dtype_size(dtype_of<BFloat16>), sizeof(BFloat16));
  EXPECT_EQ(dtype_of<int64_t>, DType::kInt64);
}

TEST(DTypeTest, ParsesAliasesCaseInsensitively) {
  EXPECT_EQ(parse_dtype("FP32"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("double"), DType::kFloat64);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_EQ(parse_dtype("BF16"), DType::kBFloat16);
  EXPECT_EQ(parse_dtype("u8"), DType::kUInt8);
  EXPECT_EQ(parse_dtype("long"), DType::kInt64);
}

TEST(DTypeTest, UnknownDTypeIsInvalidArgumentNamingIt) {
  for (const char* bad : {"", "float8", "int16", "float32 ", "complex64"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "parse_dtype('" << bad << "') did not throw";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("bfloat16"), std::string::npos) << e.what();
    }
  }
}

TEST(ReduceOpTest, NamesAndParsing) {
  const struct {
    ReduceOp op;
    const char* name;
  } kCases[] = {{ReduceOp::kSum, "sum"},
                {ReduceOp::kAvg, "avg"},
                {ReduceOp::kMin, "min"},
                {ReduceOp::kMax, "max"},
                {ReduceOp::kProduct, "product"}};
  static_assert(sizeof(kCases) / sizeof(kCases[0]) == kNumReduceOps);
  for (const auto& c : kCases) {
    EXPECT_STREQ(reduce_op_name(c.op), c.name);
    EXPECT_EQ(parse_reduce_op(c.name), c.op);
  }
  EXPECT_EQ(parse_reduce_op("MEAN"), ReduceOp::kAvg);
  EXPECT_EQ(parse_reduce_op("prod"), ReduceOp::kProduct);
  try {
    parse_reduce_op("median");
    ADD_FAILURE() << "parse_reduce_op('median') did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'median'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort
