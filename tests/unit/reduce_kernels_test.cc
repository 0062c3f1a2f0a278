// Reduction kernels against a scalar reference: every dtype x op (avg = sum, then divide) at
// lengths around the vector widths, both the public entry points (which may take the AVX2/F16C
// loops for 16-bit floats) and the generic loops, and every aliasing form of reduce_pair.
#include "kernels/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cohort/core/error.h"
#include "float16_reference.h"

namespace cohort {
namespace {

namespace ref = testing::reference;

const size_t kLengths[] = {0, 1, 7, 8, 15, 16, 17, 33, 1003};
const ReduceOp kCombineOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// ---- the reference: what one element of each op must be

template <typename M>
M reference_op(M a, M b, ReduceOp op) {
  if constexpr (std::is_floating_point_v<M>) {
    if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && (std::isnan(a) || std::isnan(b))) {
      return std::numeric_limits<M>::quiet_NaN();
    }
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProduct: return a * b;
    case ReduceOp::kMin: return b < a ? b : a;
    case ReduceOp::kMax: return a < b ? b : a;
  }
  return a;
}

// Integers wrap: do the arithmetic modulo 2^64 and keep the low bits.
template <typename T>
T reference_int_op(T a, T b, ReduceOp op) {
  const auto ua = static_cast<uint64_t>(a);
  const auto ub = static_cast<uint64_t>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return static_cast<T>(ua + ub);
    case ReduceOp::kProduct: return static_cast<T>(ua * ub);
    default: return reference_op(a, b, op);
  }
}

// float16/bfloat16: combine the exact float32 values in float32, then round once.
template <typename T>
float widen(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return static_cast<float>(ref::reference_half_to_double(v.bits));
  } else {
    return ref::float_of(static_cast<uint32_t>(v.bits) << 16);
  }
}
template <typename T>
T narrow(float f) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half{ref::reference_float_to_half(f)};
  } else {
    return BFloat16{ref::reference_float_to_bfloat16(f)};
  }
}

template <typename T>
constexpr bool kIs16Bit = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

template <typename T>
T reference_combine(T a, T b, ReduceOp op) {
  if constexpr (kIs16Bit<T>) {
    return narrow<T>(reference_op(widen(a), widen(b), op));
  } else if constexpr (std::is_integral_v<T>) {
    return reference_int_op(a, b, op);
  } else {
    return reference_op(a, b, op);
  }
}

template <typename T>
T reference_divide(T a, int divisor) {
  if constexpr (kIs16Bit<T>) {
    return narrow<T>(widen(a) / static_cast<float>(divisor));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<int64_t>(a) / divisor);  // truncates toward zero
  } else {
    return a / static_cast<T>(divisor);
  }
}

// ---- comparing and printing elements

template <typename T>
bool is_nan_element(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return ref::half_is_nan(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return ref::bfloat16_is_nan(v.bits);
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::isnan(v);
  } else {
    return false;
  }
}

template <typename T>
bool is_zero_element(T v) {
  if constexpr (kIs16Bit<T>) {
    return (v.bits & 0x7fff) == 0;
  } else {
    return v == T(0);
  }
}

// Bit-exact, except that any NaN matches any NaN (payloads may differ), and min/max of +0 and -0
// may give either zero (as std::min does, the result depends on the operand order, and the
// kernels may swap operands when out aliases b).
template <typename T>
bool same_element(T got, T want, ReduceOp op) {
  if (is_nan_element(want) || is_nan_element(got)) {
    return is_nan_element(want) && is_nan_element(got);
  }
  if ((op == ReduceOp::kMin || op == ReduceOp::kMax) && is_zero_element(got) &&
      is_zero_element(want)) {
    return true;
  }
  return std::memcmp(&got, &want, sizeof(T)) == 0;
}

template <typename T>
std::string show(T v) {
  std::ostringstream out;
  if constexpr (kIs16Bit<T>) {
    out << widen(v) << " (0x" << std::hex << v.bits << ")";
  } else if constexpr (sizeof(T) == 1) {
    out << static_cast<int>(v);
  } else {
    out << v;
  }
  return out.str();
}

// The first index where got and want differ, described; "" when they agree everywhere.
template <typename T>
std::string first_mismatch(const std::vector<T>& got, const std::vector<T>& want,
                           const std::vector<T>& a, const std::vector<T>& b, ReduceOp op) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!same_element(got[i], want[i], op)) {
      return "at " + std::to_string(i) + " of " + std::to_string(want.size()) + ": op(" +
             show(a[i]) + ", " + show(b[i]) + ") gave " + show(got[i]) + ", want " + show(want[i]);
    }
  }
  return "";
}

// ---- test data

// Random values that exercise each type: raw bit patterns for 16-bit floats (every class:
// subnormal, inf, NaN), the full range for integers, and moderate values with specials mixed in
// for float32/float64.
template <typename T>
std::vector<T> random_elements(size_t n, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> out(n);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (kIs16Bit<T>) {
      out[i] = T{static_cast<uint16_t>(rng())};
    } else if constexpr (std::is_integral_v<T>) {
      out[i] = static_cast<T>(rng());
    } else {
      out[i] = std::uniform_real_distribution<T>(-100, 100)(rng);
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    const T specials[] = {std::numeric_limits<T>::quiet_NaN(),
                          std::numeric_limits<T>::infinity(),
                          -std::numeric_limits<T>::infinity(),
                          T(0),
                          -T(0),
                          std::numeric_limits<T>::denorm_min(),
                          std::numeric_limits<T>::max()};
    for (size_t i = 0; i < n; i += 5) out[i] = specials[(i / 5 + seed) % 7];
  }
  return out;
}

// ---- the checks

using PairFn = void (*)(void*, const void*, const void*, size_t, DType, ReduceOp);

template <typename T>
void check_combine(size_t n, ReduceOp op, PairFn pair, const char* path) {
  const DType dtype = dtype_of<T>;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + reduce_op_name(op) +
               " n=" + std::to_string(n) + " via " + path);
  const auto a = random_elements<T>(n, 7 + static_cast<uint32_t>(n));
  const auto b = random_elements<T>(n, 1000 + static_cast<uint32_t>(op));
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reference_combine(a[i], b[i], op);

  std::vector<T> out(n);  // distinct output
  pair(out.data(), a.data(), b.data(), n, dtype, op);
  EXPECT_EQ(first_mismatch(out, want, a, b, op), "") << "out distinct";

  std::vector<T> acc = a;  // out aliases a
  pair(acc.data(), acc.data(), b.data(), n, dtype, op);
  EXPECT_EQ(first_mismatch(acc, want, a, b, op), "") << "out == a";

  std::vector<T> other = b;  // out aliases b
  pair(other.data(), a.data(), other.data(), n, dtype, op);
  EXPECT_EQ(first_mismatch(other, want, a, b, op), "") << "out == b";

  if (pair == &kernels::reduce_pair) {  // reduce_into is reduce_pair(acc, acc, in)
    std::vector<T> into = a;
    kernels::reduce_into(into.data(), b.data(), n, dtype, op);
    EXPECT_EQ(first_mismatch(into, want, a, b, op), "") << "reduce_into";
  }
}

using DivideFn = void (*)(void*, size_t, DType, int);

template <typename T>
void check_avg(size_t n, int world, PairFn pair, DivideFn divide, const char* path) {
  const DType dtype = dtype_of<T>;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " avg n=" + std::to_string(n) +
               " world=" + std::to_string(world) + " via " + path);
  const auto a = random_elements<T>(n, 31);
  const auto b = random_elements<T>(n, 32);
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = reference_divide(reference_combine(a[i], b[i], ReduceOp::kSum), world);
  }
  std::vector<T> acc = a;
  pair(acc.data(), acc.data(), b.data(), n, dtype, kernels::combine_op(ReduceOp::kAvg));
  divide(acc.data(), n, dtype, world);
  EXPECT_EQ(first_mismatch(acc, want, a, b, ReduceOp::kAvg), "");
}

using BothFn = void (*)(void*, void*, size_t, DType, ReduceOp, int);

// reduce_pair_into_both: both buffers end with what reduce_pair (and divide, for kAvg) computes.
template <typename T>
void check_into_both(size_t n, ReduceOp op, int world, BothFn both, const char* path) {
  const DType dtype = dtype_of<T>;
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + reduce_op_name(op) + " into both n=" +
               std::to_string(n) + " world=" + std::to_string(world) + " via " + path);
  const auto a = random_elements<T>(n, 41 + static_cast<uint32_t>(n));
  const auto b = random_elements<T>(n, 2000 + static_cast<uint32_t>(op));
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = reference_combine(a[i], b[i], op);
    if (op == ReduceOp::kAvg) want[i] = reference_divide(want[i], world);
  }
  std::vector<T> x = a;
  std::vector<T> y = b;
  both(x.data(), y.data(), n, dtype, op, world);
  EXPECT_EQ(first_mismatch(x, want, a, b, op), "") << "a";
  EXPECT_EQ(first_mismatch(y, want, a, b, op), "") << "b";
}

template <typename T>
void check_every_op() {
  for (const size_t n : kLengths) {
    for (const ReduceOp op : kCombineOps) {
      check_combine<T>(n, op, &kernels::reduce_pair, "reduce_pair");
      check_combine<T>(n, op, &kernels::detail::reduce_pair_generic, "generic loops");
    }
    for (const int world : {1, 3, 8}) {
      check_avg<T>(n, world, &kernels::reduce_pair, &kernels::divide, "reduce_pair");
      check_avg<T>(n, world, &kernels::detail::reduce_pair_generic,
                   &kernels::detail::divide_generic, "generic loops");
    }
  }
  // Past the 16-bit loops' chunk of 2048 elements too.
  for (const size_t n : {size_t{0}, size_t{1}, size_t{17}, size_t{1003}, size_t{4099}}) {
    for (const ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct, ReduceOp::kAvg}) {
      for (const int world : {1, 2, 3}) {
        check_into_both<T>(n, op, world, &kernels::reduce_pair_into_both, "public");
        check_into_both<T>(n, op, world, &kernels::detail::reduce_pair_into_both_generic,
                           "generic loops");
      }
    }
  }
}

TEST(ReduceKernelsTest, Float32) {
  check_every_op<float>();
}
TEST(ReduceKernelsTest, Float64) {
  check_every_op<double>();
}
TEST(ReduceKernelsTest, Float16) {
  check_every_op<Half>();
}
TEST(ReduceKernelsTest, BFloat16) {
  check_every_op<BFloat16>();
}
TEST(ReduceKernelsTest, Int8) {
  check_every_op<int8_t>();
}
TEST(ReduceKernelsTest, UInt8) {
  check_every_op<uint8_t>();
}
TEST(ReduceKernelsTest, Int32) {
  check_every_op<int32_t>();
}
TEST(ReduceKernelsTest, Int64) {
  check_every_op<int64_t>();
}

TEST(ReduceKernelsTest, AvgIsSumThenDivide) {
  EXPECT_EQ(kernels::combine_op(ReduceOp::kAvg), ReduceOp::kSum);
  EXPECT_EQ(kernels::combine_op(ReduceOp::kMax), ReduceOp::kMax);
  // reduce_pair given kAvg combines like kSum.
  std::vector<float> acc = {1, 2, 3};
  const std::vector<float> in = {4, 5, 6};
  kernels::reduce_into(acc.data(), in.data(), 3, DType::kFloat32, ReduceOp::kAvg);
  EXPECT_EQ(acc, (std::vector<float>{5, 7, 9}));
  kernels::divide(acc.data(), 3, DType::kFloat32, 2);
  EXPECT_EQ(acc, (std::vector<float>{2.5f, 3.5f, 4.5f}));
}

// ---- integer wrap-around (computed without UB; this suite also runs under UBSan)

template <typename T>
T combine_one(T a, T b, ReduceOp op) {
  kernels::reduce_into(&a, &b, 1, dtype_of<T>, op);
  return a;
}

TEST(ReduceKernelsTest, IntegerSumAndProductWrapAround) {
  using I32 = std::numeric_limits<int32_t>;
  using I64 = std::numeric_limits<int64_t>;
  EXPECT_EQ(combine_one<int32_t>(I32::max(), 1, ReduceOp::kSum), I32::min());
  EXPECT_EQ(combine_one<int32_t>(I32::min(), -1, ReduceOp::kSum), I32::max());
  EXPECT_EQ(combine_one<int64_t>(I64::max(), 1, ReduceOp::kSum), I64::min());
  EXPECT_EQ(combine_one<int8_t>(127, 1, ReduceOp::kSum), -128);
  EXPECT_EQ(combine_one<uint8_t>(255, 1, ReduceOp::kSum), 0);
  EXPECT_EQ(combine_one<int32_t>(65536, 65536, ReduceOp::kProduct), 0);
  EXPECT_EQ(combine_one<int32_t>(I32::min(), -1, ReduceOp::kProduct), I32::min());
  EXPECT_EQ(combine_one<int64_t>(I64::min(), -1, ReduceOp::kProduct), I64::min());
  const int64_t two32_plus_1 = (int64_t{1} << 32) + 1;  // squared: 2^64 + 2^33 + 1
  EXPECT_EQ(combine_one<int64_t>(two32_plus_1, two32_plus_1, ReduceOp::kProduct),
            (int64_t{1} << 33) + 1);
  EXPECT_EQ(combine_one<int8_t>(-128, -1, ReduceOp::kProduct), -128);
  EXPECT_EQ(combine_one<uint8_t>(16, 16, ReduceOp::kProduct), 0);
  EXPECT_EQ(combine_one<uint8_t>(255, 255, ReduceOp::kProduct), 1);
  EXPECT_EQ(combine_one<int8_t>(-128, 127, ReduceOp::kMin), -128);
  EXPECT_EQ(combine_one<int64_t>(I64::min(), I64::max(), ReduceOp::kMax), I64::max());
  // Vector lanes too, not just the scalar tail.
  std::vector<int32_t> acc(64, I32::max());
  const std::vector<int32_t> ones(64, 1);
  kernels::reduce_into(acc.data(), ones.data(), acc.size(), DType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(acc, std::vector<int32_t>(64, I32::min()));
}

TEST(ReduceKernelsTest, IntegerDivideTruncatesAndTakesLargeDivisors) {
  std::vector<int32_t> v = {-7, 7, -1, std::numeric_limits<int32_t>::min(), 0};
  kernels::divide(v.data(), v.size(), DType::kInt32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, 0, std::numeric_limits<int32_t>::min() / 2, 0}));
  // A divisor that does not fit the element type: 256 ranks averaging uint8, 128 int8.
  std::vector<uint8_t> u(20, 255);
  kernels::divide(u.data(), u.size(), DType::kUInt8, 256);
  EXPECT_EQ(u, std::vector<uint8_t>(20, 0));
  std::vector<int8_t> s(20, -128);
  kernels::divide(s.data(), s.size(), DType::kInt8, 128);
  EXPECT_EQ(s, std::vector<int8_t>(20, -1));
  std::vector<int64_t> big = {std::numeric_limits<int64_t>::max(), -9};
  kernels::divide(big.data(), big.size(), DType::kInt64, 3);
  EXPECT_EQ(big, (std::vector<int64_t>{std::numeric_limits<int64_t>::max() / 3, -3}));
}

TEST(ReduceKernelsTest, DivideRejectsNonPositiveDivisor) {
  float x = 1;
  EXPECT_THROW(kernels::divide(&x, 1, DType::kFloat32, 0), InvalidArgument);
  EXPECT_THROW(kernels::divide(&x, 1, DType::kFloat32, -2), InvalidArgument);
  EXPECT_EQ(x, 1.0f);
}

TEST(ReduceKernelsTest, IntoBothRejectsNonPositiveWorldAndOverlappingBuffers) {
  std::vector<float> v(32, 1.0f);
  EXPECT_THROW(kernels::reduce_pair_into_both(v.data(), v.data() + 16, 8, DType::kFloat32,
                                              ReduceOp::kAvg, 0),
               InvalidArgument);
  EXPECT_THROW(
      kernels::reduce_pair_into_both(v.data(), v.data() + 4, 8, DType::kFloat32, ReduceOp::kSum, 2),
      Error);
  EXPECT_EQ(v, std::vector<float>(32, 1.0f));
  // Adjacent (touching, not overlapping) buffers are fine.
  kernels::reduce_pair_into_both(v.data(), v.data() + 8, 8, DType::kFloat32, ReduceOp::kSum, 2);
  EXPECT_EQ(v[0], 2.0f);
  EXPECT_EQ(v[8], 2.0f);
}

// ---- floating special cases

template <typename T>
void expect_min_max_propagate_nan(T nan, T one) {
  for (const size_t n : {size_t{1}, size_t{40}}) {  // scalar tail and vector body
    for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<T> x(n, one), y(n, nan);
      kernels::reduce_into(x.data(), y.data(), n, dtype_of<T>, op);  // NaN second
      std::vector<T> z(n, nan), w(n, one);
      kernels::reduce_into(z.data(), w.data(), n, dtype_of<T>, op);  // NaN first
      for (size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(is_nan_element(x[i])) << dtype_name(dtype_of<T>) << " " << reduce_op_name(op);
        EXPECT_TRUE(is_nan_element(z[i])) << dtype_name(dtype_of<T>) << " " << reduce_op_name(op);
      }
    }
  }
}

TEST(ReduceKernelsTest, MinMaxPropagateNaNWhicheverSideHoldsIt) {
  expect_min_max_propagate_nan<float>(std::numeric_limits<float>::quiet_NaN(), 1.0f);
  expect_min_max_propagate_nan<double>(std::numeric_limits<double>::quiet_NaN(), 1.0);
  expect_min_max_propagate_nan<Half>(Half{0x7e00}, Half{0x3c00});
  expect_min_max_propagate_nan<BFloat16>(BFloat16{0x7fc0}, BFloat16{0x3f80});
}

TEST(ReduceKernelsTest, HalfCombinesInFloat32AndRoundsOnce) {
  // 2048 + 1 is a tie in float16 (spacing 2 there) and rounds to even: 2048. 2049 + 1 = 2050.
  std::vector<Half> acc(20, Half{0x6800});  // 2048
  const std::vector<Half> one(20, Half{0x3c00});
  kernels::reduce_into(acc.data(), one.data(), acc.size(), DType::kFloat16, ReduceOp::kSum);
  for (const Half h : acc) EXPECT_EQ(h.bits, 0x6800);
  // 300 * 300 overflows float16 (inf), though each input is representable.
  std::vector<Half> p(20, float_to_half(300.0f));
  kernels::reduce_into(p.data(), p.data(), p.size(), DType::kFloat16, ReduceOp::kProduct);
  for (const Half h : p) EXPECT_EQ(h.bits, 0x7c00);
}

// The AVX2/F16C loops (where this CPU has them) and the generic loops must agree bit for bit on
// every float16 / bfloat16 pattern, NaN payloads aside.
template <typename T>
void expect_paths_agree_on_every_pattern() {
  std::vector<T> a(65536);
  for (uint32_t i = 0; i < a.size(); ++i) a[i] = T{static_cast<uint16_t>(i)};
  std::mt19937 rng(5);
  for (int round = 0; round < 2; ++round) {
    std::vector<T> b = a;
    std::shuffle(b.begin(), b.end(), rng);
    for (const ReduceOp op : kCombineOps) {
      std::vector<T> fast(a.size()), generic(a.size());
      kernels::reduce_pair(fast.data(), a.data(), b.data(), a.size(), dtype_of<T>, op);
      kernels::detail::reduce_pair_generic(generic.data(), a.data(), b.data(), a.size(),
                                           dtype_of<T>, op);
      EXPECT_EQ(first_mismatch(fast, generic, a, b, ReduceOp::kSum), "")
          << dtype_name(dtype_of<T>) << " " << reduce_op_name(op);
    }
  }
  for (const int divisor : {3, 7, 1000}) {
    std::vector<T> fast = a, generic = a;
    kernels::divide(fast.data(), a.size(), dtype_of<T>, divisor);
    kernels::detail::divide_generic(generic.data(), a.size(), dtype_of<T>, divisor);
    EXPECT_EQ(first_mismatch(fast, generic, a, a, ReduceOp::kSum), "") << "divide by " << divisor;
  }
}

TEST(ReduceKernelsTest, Float16PathsAgreeOnEveryPattern) {
  expect_paths_agree_on_every_pattern<Half>();
}
TEST(ReduceKernelsTest, BFloat16PathsAgreeOnEveryPattern) {
  expect_paths_agree_on_every_pattern<BFloat16>();
}

// ---- aliasing

TEST(ReduceKernelsTest, AllThreeBuffersTheSame) {
  std::vector<int32_t> v = {1, -2, 3, 4, 5, 6, 7, 8, 9};
  kernels::reduce_pair(v.data(), v.data(), v.data(), v.size(), DType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(v, (std::vector<int32_t>{2, -4, 6, 8, 10, 12, 14, 16, 18}));
}

TEST(ReduceKernelsTest, PartialOverlapIsABug) {
  std::vector<float> v(32, 1.0f);
  EXPECT_THROW(kernels::reduce_pair(v.data() + 1, v.data(), v.data() + 16, 8, DType::kFloat32,
                                    ReduceOp::kSum),
               Error);
  EXPECT_THROW(kernels::reduce_into(v.data(), v.data() + 4, 8, DType::kFloat32, ReduceOp::kSum),
               Error);
  // Adjacent (touching, not overlapping) buffers are fine.
  kernels::reduce_into(v.data(), v.data() + 8, 8, DType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(v[0], 2.0f);
}

TEST(ReduceKernelsTest, ZeroCountTouchesNothing) {
  kernels::reduce_into(nullptr, nullptr, 0, DType::kFloat32, ReduceOp::kSum);
  kernels::reduce_pair(nullptr, nullptr, nullptr, 0, DType::kInt64, ReduceOp::kMax);
  kernels::divide(nullptr, 0, DType::kFloat16, 3);
}

}  // namespace
}  // namespace cohort
