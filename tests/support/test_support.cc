#include "support/test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "cohort/comm/memory_store.h"
#include "support/collective_checks.h"

namespace cohort::testing {

void run_ranks(int world, const std::function<void(int)>& fn, std::chrono::seconds deadline) {
  std::mutex mutex;
  std::condition_variable all_done;
  int finished = 0;
  std::vector<std::string> failures(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        failures[r] = e.what();
      } catch (...) {
        failures[r] = "unknown exception";
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++finished;
      all_done.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    if (!all_done.wait_for(lock, deadline, [&] { return finished == world; })) {
      std::fprintf(stderr, "run_ranks: %d of %d ranks still running after %lld s: hang\n",
                   world - finished, world, static_cast<long long>(deadline.count()));
      std::fflush(stderr);
      std::abort();  // a hung thread cannot be joined; fail loudly instead of blocking CI
    }
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(failures[r].empty()) << "rank " << r << " threw: " << failures[r];
  }
}

GroupOptions quick_options(std::chrono::milliseconds timeout) {
  GroupOptions options;
  options.timeout = timeout;
  return options;
}

std::vector<std::shared_ptr<Group>> make_inproc_groups(int world, GroupOptions options) {
  auto fabric = std::make_shared<InprocFabric>(world);
  std::vector<std::shared_ptr<Group>> groups;
  for (int r = 0; r < world; ++r) groups.push_back(Group::create_inproc(fabric, r, options));
  return groups;
}

std::vector<std::shared_ptr<Group>> make_tcp_groups(int world, GroupOptions options,
                                                    const std::string& host) {
  auto store = std::make_shared<MemoryStore>();
  options.host = host;
  std::vector<std::shared_ptr<Group>> groups(world);
  run_ranks(world, [&](int rank) { groups[rank] = Group::create(store, rank, world, options); });
  return groups;
}

double test_value(int rank, size_t index) {
  // In [1, 3]: products over 9 ranks stay below 3^9 = 19683 (exact in float16 only up to
  // 2048, so product tests use fewer distinct values; see the sweep).
  return static_cast<double>(1 + (rank + static_cast<int>(index % 7)) % 3);
}

}  // namespace cohort::testing

namespace cohort::testing {

double read_element(const void* data, size_t i, DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(data)[i];
    case DType::kFloat64: return static_cast<const double*>(data)[i];
    case DType::kFloat16: return half_to_float(static_cast<const Half*>(data)[i]);
    case DType::kBFloat16: return bfloat16_to_float(static_cast<const BFloat16*>(data)[i]);
    case DType::kInt8: return static_cast<const int8_t*>(data)[i];
    case DType::kUInt8: return static_cast<const uint8_t*>(data)[i];
    case DType::kInt32: return static_cast<const int32_t*>(data)[i];
    case DType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

void write_element(void* data, size_t i, DType dtype, double v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(v); return;
    case DType::kFloat64: static_cast<double*>(data)[i] = v; return;
    case DType::kFloat16:
      static_cast<Half*>(data)[i] = float_to_half(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      static_cast<BFloat16*>(data)[i] = float_to_bfloat16(static_cast<float>(v));
      return;
    case DType::kInt8: static_cast<int8_t*>(data)[i] = static_cast<int8_t>(v); return;
    case DType::kUInt8: static_cast<uint8_t*>(data)[i] = static_cast<uint8_t>(v); return;
    case DType::kInt32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v); return;
    case DType::kInt64: static_cast<int64_t*>(data)[i] = static_cast<int64_t>(v); return;
  }
}

double sweep_value(ReduceOp op, int rank, size_t index) {
  if (op == ReduceOp::kProduct) return (static_cast<size_t>(rank) + index) % 4 == 0 ? 2.0 : 1.0;
  return static_cast<double>(1 + (static_cast<size_t>(rank) + index % 7) % 3);
}

double sweep_expected(ReduceOp op, int world, size_t index) {
  double acc = sweep_value(op, 0, index);
  for (int r = 1; r < world; ++r) {
    const double v = sweep_value(op, r, index);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProduct: acc *= v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
    }
  }
  return op == ReduceOp::kAvg ? acc / world : acc;
}

bool matches(double got, double expected, DType dtype, ReduceOp op) {
  if (op != ReduceOp::kAvg) return got == expected;
  if (!is_floating(dtype)) return got == std::trunc(expected);
  const double rel = dtype == DType::kBFloat16  ? 1.0 / 128
                     : dtype == DType::kFloat16 ? 1.0 / 1024
                     : dtype == DType::kFloat32 ? 1e-6
                                                : 1e-14;
  return std::abs(got - expected) <= rel * std::abs(expected);
}

}  // namespace cohort::testing

namespace cohort::testing {

bool small_scale() {
  const char* scale = std::getenv("COHORT_TEST_SCALE");
  return scale != nullptr && std::string(scale) == "small";
}

std::vector<int> sweep_worlds() {
  if (small_scale()) return {1, 2, 3, 4, 5, 8};
  return {1, 2, 3, 4, 5, 6, 7, 8, 9};
}

std::vector<size_t> sweep_small_counts(int world) {
  const auto n = static_cast<size_t>(world);
  return {0, 1, n > 1 ? n - 1 : 1, 13 * n + 1};
}

std::vector<size_t> sweep_counts(int world, size_t large) {
  std::vector<size_t> counts = sweep_small_counts(world);
  if (!small_scale() || large <= kSmallScaleMaxCount) counts.push_back(large);
  return counts;
}

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> dtypes = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                                            DType::kBFloat16, DType::kInt8,    DType::kUInt8,
                                            DType::kInt32,    DType::kInt64};
  return dtypes;
}

const std::vector<ReduceOp>& all_ops() {
  static const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin,
                                            ReduceOp::kMax, ReduceOp::kProduct};
  return ops;
}

void fill_sweep(void* data, size_t count, DType dtype, ReduceOp op, int rank, size_t offset) {
  for (size_t i = 0; i < count; ++i) {
    write_element(data, i, dtype, sweep_value(op, rank, offset + i));
  }
}

std::string check_sweep(const void* data, size_t count, DType dtype, ReduceOp op, int world,
                        size_t offset) {
  for (size_t i = 0; i < count; ++i) {
    const double got = read_element(data, i, dtype);
    const double want = sweep_expected(op, world, offset + i);
    if (!matches(got, want, dtype, op)) {
      return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
             std::to_string(want);
    }
  }
  return "";
}

double movement_value(int rank, size_t index) {
  // 31 and 7 are odd, so neighbouring ranks and neighbouring indices never collide mod 128.
  return static_cast<double>((static_cast<size_t>(rank) * 31 + index * 7) % 128);
}

void fill_movement(void* data, size_t count, DType dtype, int rank, size_t offset) {
  for (size_t i = 0; i < count; ++i)
    write_element(data, i, dtype, movement_value(rank, offset + i));
}

std::string check_movement(const void* data, size_t count, DType dtype,
                           const std::function<int(size_t)>& rank_of,
                           const std::function<size_t(size_t)>& index_of) {
  for (size_t i = 0; i < count; ++i) {
    const double got = read_element(data, i, dtype);
    const double want = movement_value(rank_of(i), index_of(i));
    if (got != want) {
      return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
             std::to_string(want) + " (rank " + std::to_string(rank_of(i)) + " index " +
             std::to_string(index_of(i)) + ")";
    }
  }
  return "";
}

void allreduce_sweep_case(Group& group, size_t count, DType dtype, ReduceOp op,
                          Algorithm algorithm) {
  fail_if(group, check_allreduce(group, count, dtype, op, algorithm), algorithm_name(algorithm),
          " world ", group.size(), " count ", count, " ", dtype_name(dtype), " ",
          reduce_op_name(op));
}

}  // namespace cohort::testing
