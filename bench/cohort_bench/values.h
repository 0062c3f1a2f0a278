// Closed-form buffer contents, so that every rank can check its own result without seeing the
// others' data.
//
// Note [Closed-form values]: a rank's contents are a Pattern of kPeriod numbers repeated along
// the buffer; element i holds values[(offset + i) % kPeriod], where `offset` is the element's
// index in the logical whole (block b of an all-to-all starts at offset b * block). kPeriod is
// a prime, so a block moved by a power-of-two distance lands on different values and is caught.
// Values are small positive integers chosen so that every result is exact in every dtype
// (int8 included): sums stay within largest_exact_integer(dtype), products have few factors 2.
// 0 appears in no pattern, so outputs are pre-filled with 0 and an element that a collective
// never wrote counts as wrong. Only kAvg on floating types is inexact; its tolerance is one
// unit in the last place of the dtype.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cohort/core/dtype.h"

namespace cohort::bench {

inline constexpr size_t kPeriod = 251;

struct Pattern {
  std::vector<double> values;     // kPeriod entries, never 0
  std::vector<double> tolerance;  // allowed |got - expected| per entry; 0: exact
};

// The largest n such that every integer in [0, n] is exact in `dtype`.
double largest_exact_integer(DType dtype);

// What rank `rank` contributes to a reduction with `op` over `ranks` ranks.
Pattern reduce_input(DType dtype, ReduceOp op, int ranks, int rank);
// The result of that reduction (kAvg: with the library's rounding and truncation).
Pattern reduce_result(DType dtype, ReduceOp op, int ranks);
// Contents moved without arithmetic (broadcast, allgather, all-to-all); differ between ranks.
Pattern plain_input(DType dtype, int rank);

// data[i] = pattern.values[(offset + i) % kPeriod] for i in [0, count).
void fill(void* data, size_t count, DType dtype, const Pattern& pattern, size_t offset = 0);
// The number of elements of data[0, count) that differ from the pattern beyond its tolerance.
uint64_t count_wrong(const void* data, size_t count, DType dtype, const Pattern& expected,
                     size_t offset = 0);

}  // namespace cohort::bench
