// cohort-staged-bench: float32 sum allreduce of CUDA device buffers through cohort's staged group
// (cohort/comm/cuda_staging.h: pinned host memory, cohort's own algorithms over shared memory or
// TCP), one line per size in nccl-tests' format, as cohort-bench prints host collectives
// (docs/bench.md). Its peer is bench/gpu/torch_gloo_cuda_allreduce.py: torch.distributed's gloo on
// CUDA tensors, with the same sizes, timing, check and lines; bench/gpu/run.sh runs both.
//
//   torchrun --standalone --nproc-per-node 2 --no-python build/bin/cohort-staged-bench
//
// One process per rank, started by a launcher (torchrun, cohortrun): cohort::init() reads the
// launcher's environment. Each rank uses cuda:<local rank mod device count>, so 2 ranks on a
// machine with one GPU share it. Rank 0 prints. The CUDA runtime and cohort only: no libtorch.

#include <cuda_runtime_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cohort/comm/cuda_staging.h"
#include "cohort/comm/group.h"
#include "cohort/comm/init.h"
#include "cohort/comm/launch_env.h"
#include "cohort/core/error.h"
#include "launched_main.h"

namespace {

using Clock = std::chrono::steady_clock;

using launched_main::kExitFailure;
using launched_main::kExitOk;
using launched_main::kExitUsage;

struct Config {
  size_t min_bytes = size_t{4} << 10;
  size_t max_bytes = size_t{256} << 20;
  size_t factor = 4;  // each size is the last times this (nccl-tests' -f)
  int iters = 20;
  int warmup = 5;
  size_t chunk_bytes = 0;  // CudaStagingOptions::chunk_bytes; 0: the group's default
  double timeout_s = 120;
  int world = 1;  // from the launcher
  int rank = 0;
  int local_rank = 0;
};

void add_options(CLI::App& app, Config& c) {
  app.add_option("-b,--min-bytes", c.min_bytes, "the smallest size (K, M, G are binary)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("-e,--max-bytes", c.max_bytes, "the largest size")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("-f,--factor", c.factor, "each size is the previous one times this")
      ->capture_default_str();
  app.add_option("-n,--iters", c.iters, "timed allreduces per size; the median is reported")
      ->capture_default_str();
  app.add_option("-w,--warmup", c.warmup, "untimed allreduces before them")->capture_default_str();
  app.add_option("--chunk-bytes", c.chunk_bytes,
                 "CudaStagingOptions::chunk_bytes (0: COHORT_STAGING_CHUNK_BYTES, else 4 MiB)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  app.add_option("--timeout", c.timeout_s, "deadline of every collective, seconds")
      ->capture_default_str();
  app.footer(
      "Ranks: start them with a launcher (torchrun --no-python, cohortrun).\n"
      "Exit codes: 0 ok, 1 the run failed or a result was wrong, 2 bad arguments.");
}

void validate(const Config& c) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw cohort::InvalidArgument(message);
  };
  require(c.min_bytes >= sizeof(float) && c.min_bytes <= c.max_bytes,
          "--min-bytes must be at least 4 and at most --max-bytes");
  require(c.factor >= 2, "--factor must be at least 2");
  require(c.iters >= 1 && c.warmup >= 0, "--iters must be >= 1, --warmup >= 0");
  require(c.timeout_s > 0 && c.timeout_s <= 86400, "--timeout must be in (0, 86400] seconds");
  // value() times the sum of ranks 1..N must stay an exact float32 (below 2^24).
  require(c.world <= 256, "at most 256 ranks (the check's sums must stay exact in float32)");
}

void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// ---- values: small integers, exact in float32 when summed, repeating with a prime period so
// that a block landing at a power-of-two offset from its place is caught (as cohort-bench's).

constexpr size_t kPeriod = 251;

float value(int rank, size_t index) {
  return static_cast<float>((rank + 1) * static_cast<int64_t>(index % kPeriod + 1));
}

float expected_sum(int world, size_t index) {
  const int64_t ranks = static_cast<int64_t>(world) * (world + 1) / 2;  // 1 + 2 + ... + world
  return static_cast<float>(ranks * static_cast<int64_t>(index % kPeriod + 1));
}

// ---- device memory

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { cuda_check(cudaMalloc(&data_, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* get() const { return static_cast<float*>(data_); }

 private:
  void* data_ = nullptr;
};

// What one size needs: the buffer the allreduce runs on, and this rank's input kept aside so
// that every timed allreduce starts from it (sums repeated in place would overflow to inf).
struct SizeBuffers {
  explicit SizeBuffers(size_t n) : count(n), data(n * sizeof(float)), input(n * sizeof(float)) {}
  size_t count;
  DeviceBuffer data;
  DeviceBuffer input;
};

void fill_input(SizeBuffers& b, int rank) {
  std::vector<float> host(b.count);
  for (size_t i = 0; i < b.count; ++i) host[i] = value(rank, i);
  cuda_check(
      cudaMemcpy(b.input.get(), host.data(), b.count * sizeof(float), cudaMemcpyHostToDevice),
      "cudaMemcpy to the device");
}

// Elements of the result that differ from the expected sum.
int64_t count_wrong(const SizeBuffers& b, int world) {
  std::vector<float> host(b.count);
  cuda_check(cudaMemcpy(host.data(), b.data.get(), b.count * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy from the device");
  int64_t wrong = 0;
  for (size_t i = 0; i < b.count; ++i) wrong += host[i] != expected_sum(world, i);
  return wrong;
}

// ---- the run

struct Row {
  size_t bytes = 0;
  size_t count = 0;
  double time_us = 0;  // median over iterations of the slowest rank
  int64_t wrong = 0;   // over all ranks
};

class Bench {
 public:
  explicit Bench(const Config& c) : config_(c) {}

  void start() {
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (devices < 1) throw cohort::ConfigError("cohort-staged-bench: no CUDA device");
    device_ = config_.local_rank % devices;
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cohort::InitOptions init;
    init.group.timeout = cohort::Milliseconds(static_cast<int64_t>(config_.timeout_s * 1000));
    init.backend = cohort::Backend::kNative;
    host_ = cohort::init(init);
    cohort::CudaStagingOptions staging;
    staging.device = device_;
    staging.chunk_bytes = config_.chunk_bytes;
    staged_ = cohort::create_cuda_staged_group(host_, staging);
  }

  Row measure(size_t bytes) {
    SizeBuffers buffers(bytes / sizeof(float));
    fill_input(buffers, config_.rank);
    std::vector<double> seconds;
    for (int i = 0; i < config_.warmup + config_.iters; ++i) {
      const double t = timed_allreduce(buffers);
      if (i >= config_.warmup) seconds.push_back(t);
    }
    Row row;
    row.count = buffers.count;
    row.bytes = buffers.count * sizeof(float);
    row.time_us = median_of_slowest(seconds) * 1e6;
    // The last timed allreduce started from the input too: its result is checked.
    std::vector<int64_t> wrong{count_wrong(buffers, config_.world)};
    host_->allreduce(cohort::make_buffer(wrong));
    row.wrong = wrong[0];
    return row;
  }

  int device() const { return device_; }

  void abort(const std::string& reason) noexcept {
    if (staged_) staged_->abort(reason);
    if (host_) host_->abort(reason);
  }

  // Collective.
  void finish() {
    staged_.reset();
    if (host_) host_->barrier();  // nobody closes its connections while a peer still talks
    host_.reset();
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

 private:
  // One allreduce timed alone: the input restored (untimed), the ranks lined up by a barrier,
  // then the allreduce until its result is on the device (the staged call returns then; the
  // stream is synchronized too, as the peer synchronizes after gloo's copy back).
  double timed_allreduce(SizeBuffers& b) {
    cuda_check(cudaMemcpyAsync(b.data.get(), b.input.get(), b.count * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    host_->barrier();
    cohort::CollectiveOptions options;
    options.stream = stream_;
    const auto start = Clock::now();
    staged_->allreduce(cohort::Buffer{b.data.get(), b.count, cohort::DType::kFloat32, device_},
                       options);
    cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  // Each iteration's time is its slowest rank's (the collective is done when every rank is);
  // the median of those over the iterations.
  double median_of_slowest(std::vector<double> seconds) {
    cohort::CollectiveOptions max;
    max.op = cohort::ReduceOp::kMax;
    host_->allreduce(cohort::make_buffer(seconds), max);
    std::sort(seconds.begin(), seconds.end());
    const size_t n = seconds.size();
    return n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  }

  Config config_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<cohort::Group> host_;    // cohort::init()'s
  std::shared_ptr<cohort::Group> staged_;  // device buffers over host_
};

// ---- report: cohort-bench's columns (bench/cohort_bench/report.cc)

double busbw_factor(int world) {
  return 2.0 * (world - 1) / world;
}

void print_header(const Config& c, int device) {
  std::printf(
      "# cohort-staged-bench allreduce  ranks %d  device cuda:%d  dtype float32  op sum  "
      "iters %d  warmup %d  chunk %s\n",
      c.world, device, c.iters, c.warmup,
      c.chunk_bytes ? std::to_string(c.chunk_bytes).c_str() : "auto");
  std::printf(
      "# time: per op, median over iters of the slowest rank (each op alone: input restored, "
      "barrier, allreduce, stream synchronized); busbw factor %.4g\n#\n",
      busbw_factor(c.world));
  std::printf("# %13s %12s %9s %7s %12s %12s %12s %8s\n", "size(B)", "count", "type", "redop",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  std::fflush(stdout);
}

void print_row(const Row& row, int world) {
  const double algbw = row.bytes / (row.time_us * 1e-6) / 1e9;
  std::printf("  %13zu %12zu %9s %7s %12.2f %12.3f %12.3f %8lld\n", row.bytes, row.count, "float32",
              "sum", row.time_us, algbw, algbw * busbw_factor(world),
              static_cast<long long>(row.wrong));
  std::fflush(stdout);
}

void print_footer(const std::vector<Row>& rows, int world) {
  int64_t wrong = 0;
  double busbw = 0;
  for (const auto& row : rows) {
    wrong += row.wrong;
    busbw += row.bytes / (row.time_us * 1e-6) / 1e9 * busbw_factor(world);
  }
  std::printf("#\n# #wrong total: %lld (%s)\n", static_cast<long long>(wrong),
              wrong ? "FAILED" : "OK");
  std::printf("# avg busbw: %.3f GB/s (mean over %zu sizes)\n", busbw / rows.size(), rows.size());
  std::fflush(stdout);
}

int run(const Config& c) {
  Bench bench(c);
  try {
    bench.start();
    if (c.rank == 0) print_header(c, bench.device());
    std::vector<Row> rows;
    for (size_t bytes = c.min_bytes; bytes <= c.max_bytes; bytes *= c.factor) {
      rows.push_back(bench.measure(bytes));
      if (c.rank == 0) print_row(rows.back(), c.world);
    }
    if (c.rank == 0) print_footer(rows, c.world);
    bench.finish();
    for (const auto& row : rows) {
      if (row.wrong) return kExitFailure;
    }
  } catch (const std::exception& e) {
    bench.abort("cohort-staged-bench rank " + std::to_string(c.rank) + " failed: " + e.what());
    throw;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  CLI::App app{"cohort-staged-bench: allreduce of CUDA buffers through cohort's staged group",
               "cohort-staged-bench"};
  add_options(app, config);
  return launched_main::run_main<Config>(
      argc, argv, app, config, [](Config& c) { validate(c); }, run);
}
