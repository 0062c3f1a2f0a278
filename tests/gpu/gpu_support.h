// What the GPU tests share: how many CUDA devices this machine has (none where
// cudaGetDeviceCount fails, e.g. without a driver), a skip that says so, device arrays, and
// NCCL groups over in-process bootstrap groups, one thread and one GPU per rank.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"

namespace cohort::testing {

// Any error of cudaGetDeviceCount counts as no GPU.
int visible_gpus();

// Skips the test, with the reason, when fewer than `n` CUDA devices are visible.
#define COHORT_REQUIRE_GPUS(n)                                                          \
  do {                                                                                  \
    const int have_gpus = ::cohort::testing::visible_gpus();                            \
    if (have_gpus < (n)) {                                                              \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s); cudaGetDeviceCount reports " \
                   << have_gpus << " here";                                             \
    }                                                                                   \
  } while (0)

// Throws std::runtime_error naming `call` when rc is not cudaSuccess.
void cuda_ok(cudaError_t rc, const char* call);

// `count` elements of T on the current CUDA device.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&data_), bytes() == 0 ? 1 : bytes()), "cudaMalloc");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  size_t count() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    cuda_ok(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  // Synchronous: waits for the work queued on the legacy default stream, where the tests'
  // collectives are ordered unless they name another stream.
  std::vector<T> download() const {
    std::vector<T> host(count_);
    cuda_ok(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// Starts `world` processes of this test binary running the (disabled) test `filter`, with
// RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a free port on loopback) for cohort::init()
// plus `env` ("K=V"); each must exit 0 within two minutes (failures name the rank and show its
// output). Processes, not threads, for ranks that share a GPU: the autograd engine runs every
// CUDA backward of a process on one thread per device, so two thread ranks blocked in a
// collective inside their backward would wait for each other forever.
void run_rank_processes(int world, const std::string& filter, const std::vector<std::string>& env);

// Runs fn(rank, nccl_group) on `world` threads, rank r on CUDA device r, with NCCL groups made
// from in-process bootstrap groups.
void with_nccl_groups(int world, const std::function<void(int, Group&)>& fn);

}  // namespace cohort::testing
