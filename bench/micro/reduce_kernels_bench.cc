// Throughput of kernels::reduce_into (acc[i] += in[i]) per dtype, next to memcpy of the same
// buffer as the memory-bandwidth reference. 64 KiB stays in L2 and shows the kernel's compute
// speed; 8 MiB leaves the cache and shows whether it keeps up with memory.
//
// generic_bench runs the compiler-vectorized loops alone (kernels::detail), which is what
// float16/bfloat16 get on CPUs without AVX2+F16C.
//
// Counters (base 1000): buf_GBps = buffer bytes per second (what a collective's algbw counts);
// mem_GBps = bytes moved: 3 per buffer byte for reduce_into (two reads, one write), 2 for memcpy.
//
//   reduce_kernels_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "kernels/reduce_kernels.h"

namespace {

using cohort::DType;

constexpr size_t kSmall = 64 << 10;
constexpr size_t kLarge = 8 << 20;

void set_counters(benchmark::State& state, size_t bytes, int touches) {
  const double done = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.counters["buf_GBps"] = benchmark::Counter(done / 1e9, benchmark::Counter::kIsRate);
  state.counters["mem_GBps"] =
      benchmark::Counter(done * touches / 1e9, benchmark::Counter::kIsRate);
}

// Fills with values that stay normal under repeated summing (subnormals would measure the
// CPU's microcode assists, not the kernel).
void fill(std::vector<unsigned char>& buffer, DType dtype, double value) {
  const size_t count = buffer.size() / cohort::dtype_size(dtype);
  void* data = buffer.data();
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::kFloat32: static_cast<float*>(data)[i] = static_cast<float>(value); break;
      case DType::kFloat16:
        static_cast<cohort::Half*>(data)[i] = cohort::float_to_half(static_cast<float>(value));
        break;
      case DType::kBFloat16:
        static_cast<cohort::BFloat16*>(data)[i] =
            cohort::float_to_bfloat16(static_cast<float>(value));
        break;
      case DType::kInt32: static_cast<int32_t*>(data)[i] = static_cast<int32_t>(value); break;
      default: std::memset(data, 0, buffer.size()); return;
    }
  }
}

using PairFn = void (*)(void*, const void*, const void*, size_t, DType, cohort::ReduceOp);

void run_reduce(benchmark::State& state, DType dtype, cohort::ReduceOp op, PairFn pair) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / cohort::dtype_size(dtype);
  std::vector<unsigned char> acc(bytes), in(bytes);
  fill(acc, dtype, 1.0);
  fill(in, dtype, 1.0 / 1024);
  for (auto _ : state) {
    pair(acc.data(), acc.data(), in.data(), count, dtype, op);
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 3);
}

// kernels::reduce_into: what the algorithms call.
void reduce_into_bench(benchmark::State& state, DType dtype, cohort::ReduceOp op) {
  run_reduce(state, dtype, op,
             [](void* out, const void*, const void* in, size_t n, DType d, cohort::ReduceOp o) {
               cohort::kernels::reduce_into(out, in, n, d, o);
             });
}

// The compiler-vectorized loops alone, for comparison with the AVX2/F16C loops of 16-bit floats.
void generic_bench(benchmark::State& state, DType dtype, cohort::ReduceOp op) {
  run_reduce(state, dtype, op, &cohort::kernels::detail::reduce_pair_generic);
}

void memcpy_bench(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> dst(bytes, 1), src(bytes, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, bytes, 2);
}

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(kSmall)->Arg(kLarge);
}

}  // namespace

BENCHMARK(memcpy_bench)->Apply(sizes);
BENCHMARK_CAPTURE(reduce_into_bench, float32_sum, DType::kFloat32, cohort::ReduceOp::kSum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(reduce_into_bench, bfloat16_sum, DType::kBFloat16, cohort::ReduceOp::kSum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(reduce_into_bench, float16_sum, DType::kFloat16, cohort::ReduceOp::kSum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(reduce_into_bench, int32_sum, DType::kInt32, cohort::ReduceOp::kSum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(generic_bench, bfloat16_sum, DType::kBFloat16, cohort::ReduceOp::kSum)
    ->Apply(sizes);
BENCHMARK_CAPTURE(generic_bench, float16_sum, DType::kFloat16, cohort::ReduceOp::kSum)
    ->Apply(sizes);
// Other ops.
BENCHMARK_CAPTURE(reduce_into_bench, float16_max, DType::kFloat16, cohort::ReduceOp::kMax)
    ->Apply(sizes);
BENCHMARK_CAPTURE(reduce_into_bench, float32_max, DType::kFloat32, cohort::ReduceOp::kMax)
    ->Apply(sizes);

BENCHMARK_MAIN();
