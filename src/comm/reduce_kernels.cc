#include "reduce_kernels.h"

#include <algorithm>
#include <type_traits>

#include "cohort/core/check.h"

namespace cohort::kernels {

namespace {

// Arithmetic type used for combining elements of T.
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
inline float load(Half v) { return half_to_float(v); }
inline float load(BFloat16 v) { return bfloat16_to_float(v); }

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
    // Promote to at least unsigned int so that uint16-style promotion to int cannot overflow.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<M>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b)));
  } else {
    return a * b;
  }
}

struct SumOp {
  template <typename M>
  static M apply(M a, M b) { return add(a, b); }
};
struct ProductOp {
  template <typename M>
  static M apply(M a, M b) { return mul(a, b); }
};
struct MinOp {
  template <typename M>
  static M apply(M a, M b) { return b < a ? b : a; }
};
struct MaxOp {
  template <typename M>
  static M apply(M a, M b) { return a < b ? b : a; }
};

template <typename T, typename Op>
void pair_loop(T* __restrict out, const T* __restrict a, const T* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = store<T>(Op::apply(load(a[i]), load(b[i])));
}

// In-place form: separate so the compiler sees acc and in cannot overlap.
template <typename T, typename Op>
void into_loop(T* __restrict acc, const T* __restrict in, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] = store<T>(Op::apply(load(acc[i]), load(in[i])));
}

template <typename T, typename Op>
void dispatch_pair(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (o == x) {
    into_loop<T, Op>(o, y, n);
  } else {
    pair_loop<T, Op>(o, x, y, n);
  }
}

template <typename T>
void by_op(void* out, const void* a, const void* b, size_t n, ReduceOp op) {
  switch (combine_op(op)) {
    case ReduceOp::kSum: return dispatch_pair<T, SumOp>(out, a, b, n);
    case ReduceOp::kProduct: return dispatch_pair<T, ProductOp>(out, a, b, n);
    case ReduceOp::kMin: return dispatch_pair<T, MinOp>(out, a, b, n);
    case ReduceOp::kMax: return dispatch_pair<T, MaxOp>(out, a, b, n);
    case ReduceOp::kAvg: break;
  }
  COHORT_INTERNAL_ASSERT(false, "unhandled reduce op ", reduce_op_name(op));
}

template <typename T>
void divide_loop(T* __restrict data, size_t n, int divisor) {
  using M = typename Math<T>::type;
  if constexpr (std::is_floating_point_v<M>) {
    // Divide rather than multiply by the reciprocal: the result is then identical to one
    // process summing and dividing, which parity tests compare against.
    for (size_t i = 0; i < n; ++i) data[i] = store<T>(load(data[i]) / static_cast<M>(divisor));
  } else {
    for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / static_cast<M>(divisor));
  }
}

}  // namespace

void reduce_pair(void* out, const void* a, const void* b, size_t count, DType dtype,
                 ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kFloat32: return by_op<float>(out, a, b, count, op);
    case DType::kFloat64: return by_op<double>(out, a, b, count, op);
    case DType::kFloat16: return by_op<Half>(out, a, b, count, op);
    case DType::kBFloat16: return by_op<BFloat16>(out, a, b, count, op);
    case DType::kInt8: return by_op<int8_t>(out, a, b, count, op);
    case DType::kUInt8: return by_op<uint8_t>(out, a, b, count, op);
    case DType::kInt32: return by_op<int32_t>(out, a, b, count, op);
    case DType::kInt64: return by_op<int64_t>(out, a, b, count, op);
  }
  COHORT_INTERNAL_ASSERT(false, "unhandled dtype ", static_cast<int>(dtype));
}

void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op) {
  reduce_pair(acc, acc, in, count, dtype, op);
}

void divide(void* data, size_t count, DType dtype, int divisor) {
  if (count == 0 || divisor == 1) return;
  switch (dtype) {
    case DType::kFloat32: return divide_loop(static_cast<float*>(data), count, divisor);
    case DType::kFloat64: return divide_loop(static_cast<double*>(data), count, divisor);
    case DType::kFloat16: return divide_loop(static_cast<Half*>(data), count, divisor);
    case DType::kBFloat16: return divide_loop(static_cast<BFloat16*>(data), count, divisor);
    case DType::kInt8: return divide_loop(static_cast<int8_t*>(data), count, divisor);
    case DType::kUInt8: return divide_loop(static_cast<uint8_t*>(data), count, divisor);
    case DType::kInt32: return divide_loop(static_cast<int32_t*>(data), count, divisor);
    case DType::kInt64: return divide_loop(static_cast<int64_t*>(data), count, divisor);
  }
  COHORT_INTERNAL_ASSERT(false, "unhandled dtype ", static_cast<int>(dtype));
}

}  // namespace cohort::kernels
