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
