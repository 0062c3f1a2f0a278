// Elementwise reduction kernels used by every algorithm. Note [Reduce kernels]: loops are
// written over __restrict pointers with no branches on values so that g++ -O3 vectorizes them
// (checked with -fopt-info-vec / -fdump-tree-vect-details; see docs/algorithms.md), and on
// x86-64 they are also built for AVX2 (Note [Kernel clones] in reduce_kernels.cc). float16 and
// bfloat16 combine in float32 and round once per combine. Integer sum/product wrap around
// (computed unsigned, so overflow is defined behaviour, as in torch). Floating min/max
// propagate NaN.
#pragma once

#include <cstddef>

#include "cohort/core/dtype.h"

namespace cohort::kernels {

// acc[i] = op(acc[i], in[i]). kAvg combines like kSum; finish it with divide().
void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op);

// out[i] = op(a[i], b[i]); out may be a, b or a separate buffer (no partial overlap).
void reduce_pair(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= divisor (integer division, truncating, for integer dtypes): the last step of kAvg.
// divisor must be positive (InvalidArgument otherwise).
void divide(void* data, size_t count, DType dtype, int divisor);

// a[i] = b[i] = op(a[i], b[i]), and divided by `world` for kAvg, bit for bit what
// reduce_pair(a, a, b) and divide(a, world) followed by a copy into b compute, in one pass: the
// two-rank in-place allreduce stores each result into both ranks' buffers. a and b must not
// overlap.
void reduce_pair_into_both(void* a, void* b, size_t count, DType dtype, ReduceOp op, int world);

// The op algorithms combine with: kAvg sums first and divides at the end.
inline ReduceOp combine_op(ReduceOp op) {
  return op == ReduceOp::kAvg ? ReduceOp::kSum : op;
}

namespace detail {
// The compiler-vectorized loops alone, without the hand-written AVX2/F16C loops that serve
// float16 and bfloat16 where the CPU has them (Note [16-bit floats on AVX2]): for tests that
// check the two agree and benchmarks that compare them. Same contracts as above.
void reduce_pair_generic(void* out, const void* a, const void* b, size_t count, DType dtype,
                         ReduceOp op);
void divide_generic(void* data, size_t count, DType dtype, int divisor);
void reduce_pair_into_both_generic(void* a, void* b, size_t count, DType dtype, ReduceOp op,
                                   int world);
}  // namespace detail

}  // namespace cohort::kernels
