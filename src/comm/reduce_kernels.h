// Elementwise reduction kernels used by every algorithm. Note [Reduce kernels]: loops are
// written over __restrict pointers with no branches on values so that g++ -O3 vectorizes them
// (checked with -fopt-info-vec; see docs/algorithms.md). float16 and bfloat16 accumulate in
// float32 and round once per combine. Integer sum/product wrap around (computed unsigned, so
// overflow is defined behaviour, as in torch).
#pragma once

#include <cstddef>

#include "cohort/core/dtype.h"

namespace cohort::kernels {

// acc[i] = op(acc[i], in[i]). kAvg combines like kSum; finish it with divide().
void reduce_into(void* acc, const void* in, size_t count, DType dtype, ReduceOp op);

// out[i] = op(a[i], b[i]); out may alias a.
void reduce_pair(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= divisor (integer division for integer dtypes): the last step of kAvg.
void divide(void* data, size_t count, DType dtype, int divisor);

// The op algorithms combine with: kAvg sums first and divides at the end.
inline ReduceOp combine_op(ReduceOp op) { return op == ReduceOp::kAvg ? ReduceOp::kSum : op; }

}  // namespace cohort::kernels
