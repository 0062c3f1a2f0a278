// Helpers shared by the tests: run N ranks as threads with a hard deadline, so that a hang
// fails the test instead of blocking CI.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/core/check.h"

namespace cohort::testing {

// Runs fn(rank) on `world` threads. Fails the test (and aborts the process, since a stuck
// thread cannot be cancelled) if they have not all returned within `deadline`. Exceptions
// thrown by fn are reported as test failures naming the rank.
void run_ranks(int world, const std::function<void(int rank)>& fn,
               std::chrono::seconds deadline = std::chrono::seconds(120));

// Options for test groups: a short collective deadline so that a broken test fails quickly.
GroupOptions quick_options(std::chrono::milliseconds timeout = std::chrono::seconds(20));

// When `error` is not empty: aborts the group (so the other ranks fail fast instead of waiting
// for their deadline) and throws, naming the case.
template <typename... Context>
void fail_if(Group& group, const std::string& error, const Context&... context) {
  if (error.empty()) return;
  const std::string text = detail::concat(context...) + ": " + error;
  group.abort("test failure on rank " + std::to_string(group.rank()) + ": " + text);
  throw std::runtime_error(text);
}

// `world` in-process groups over one fabric, created in rank order.
std::vector<std::shared_ptr<Group>> make_inproc_groups(int world, GroupOptions options = {});
// `world` groups made by Group::create (TCP, and shared memory since all ranks are in this
// process) over one MemoryStore, created concurrently as real ranks would be.
std::vector<std::shared_ptr<Group>> make_tcp_groups(int world, GroupOptions options = {},
                                                    const std::string& host = "127.0.0.1");

// Deterministic per-rank, per-index test value, small enough that sums and products of up to
// 9 ranks are exact in every dtype (including int8 and float16).
double test_value(int rank, size_t index);

}  // namespace cohort::testing

namespace cohort::testing {

// Element access through double, for tests that sweep every dtype.
double read_element(const void* data, size_t index, DType dtype);
void write_element(void* data, size_t index, DType dtype, double value);

// The value a rank contributes at `index` in reduction sweeps. For kProduct values are 1 or 2
// with at most three 2s across 9 ranks, so products stay exact even in int8; for the other ops
// values are 1..3, so sums of 9 ranks are exact in every dtype.
double sweep_value(ReduceOp op, int rank, size_t index);
// The exact result of reducing sweep_value over `world` ranks (kAvg: before rounding).
double sweep_expected(ReduceOp op, int world, size_t index);
// Whether `got` is the right result for `expected` in this dtype: exact, except kAvg on
// floating types, which may differ by the dtype's rounding.
bool matches(double got, double expected, DType dtype, ReduceOp op);

}  // namespace cohort::testing

namespace cohort::testing {

// COHORT_TEST_SCALE=small (the sanitizer legs of CI): sweeps keep world sizes
// {1, 2, 3, 4, 5, 8} and skip counts above kSmallScaleMaxCount, so that the inproc suite
// stays within minutes under TSan.
bool small_scale();
inline constexpr size_t kSmallScaleMaxCount = 10000;
// World sizes to sweep: 1..9, or the small-scale subset.
std::vector<int> sweep_worlds();
// The counts a sweep over `world` ranks covers: 0, 1, fewer than world, not divisible by
// world, and `large` (dropped at small scale when above kSmallScaleMaxCount).
std::vector<size_t> sweep_counts(int world, size_t large);
// The same without the large one.
std::vector<size_t> sweep_small_counts(int world);

// Every dtype and every reduce op, for sweeps.
const std::vector<DType>& all_dtypes();
const std::vector<ReduceOp>& all_ops();

// Fills data[count] with sweep_value(op, rank, offset + i).
void fill_sweep(void* data, size_t count, DType dtype, ReduceOp op, int rank, size_t offset = 0);
// Checks data[count] against sweep_expected(op, world, offset + i); returns a description of
// the first wrong element, or "".
std::string check_sweep(const void* data, size_t count, DType dtype, ReduceOp op, int world,
                        size_t offset = 0);

// One allreduce of a sweep with `algorithm` on this rank: check_allreduce (collective_checks.h),
// failing (as fail_if) naming the case when an element is wrong. Every rank calls it with the
// same case.
void allreduce_sweep_case(Group& group, size_t count, DType dtype, ReduceOp op,
                          Algorithm algorithm);

// A value that tells apart (rank, index) and is exact in every dtype (0..127), for pure data
// movement tests (broadcast, gather, all_to_all, ...).
double movement_value(int rank, size_t index);
// Fills data[count] with movement_value(rank, offset + i).
void fill_movement(void* data, size_t count, DType dtype, int rank, size_t offset = 0);
// Returns a description of the first element of data[count] that differs from
// movement_value(rank_of(i), index_of(i)), or "".
std::string check_movement(const void* data, size_t count, DType dtype,
                           const std::function<int(size_t)>& rank_of,
                           const std::function<size_t(size_t)>& index_of);

}  // namespace cohort::testing
