#include "engines/cuda/cuda_device_staging.h"

#include <algorithm>
#include <string>
#include <thread>

#include "engines/cuda/cuda_call.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {

using cuda::check_cuda;

// Polls `event` until its work is done: a blocking wait (cudaEventSynchronize) has no deadline.
void wait_for(cudaEvent_t event, Deadline deadline, const char* what) {
  for (unsigned polls = 0;; ++polls) {
    const cudaError_t rc = cudaEventQuery(event);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) check_cuda(rc, what);
    if (polls % 1024 == 1023 && deadline.expired()) {
      throw TimeoutError(std::string(what) + ": the device's copies did not finish by the deadline");
    }
    std::this_thread::yield();
  }
}

}  // namespace

// The copies of one call. Every wait is on the staging's own streams, which start after the
// work queued on the caller's stream before the call.
class CudaCopies final : public DeviceCopies {
 public:
  CudaCopies(CudaDeviceStaging& staging, cudaStream_t caller)
      : staging_(staging), guard_(staging.device_) {
    cudaEvent_t ready = staging_.event(0);
    check_cuda(cudaEventRecord(ready, caller), "cudaEventRecord (caller's stream)");
    check_cuda(cudaStreamWaitEvent(staging_.to_host_, ready, 0), "cudaStreamWaitEvent");
    check_cuda(cudaStreamWaitEvent(staging_.to_device_, ready, 0), "cudaStreamWaitEvent");
  }

  void to_host(void* host, const void* device, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, staging_.to_host_),
               "cudaMemcpyAsync (device to host)");
    // Event 0 ordered the streams after the caller's; the copies' events follow it.
    check_cuda(cudaEventRecord(staging_.event(++copied_to_host_), staging_.to_host_),
               "cudaEventRecord (copy to host)");
  }

  void wait_to_host(size_t n, Deadline deadline) override {
    COHORT_INTERNAL_ASSERT(n <= copied_to_host_, "waiting for copy ", n, " of ", copied_to_host_);
    if (n > 0) wait_for(staging_.event(n), deadline, "staging a device buffer to the host");
  }

  void to_device(void* device, const void* host, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, staging_.to_device_),
               "cudaMemcpyAsync (host to device)");
  }

  void wait_to_device(Deadline deadline) override {
    // After every event of the copies to the host: a fresh index of the pool.
    cudaEvent_t done = staging_.event(copied_to_host_ + 1);
    check_cuda(cudaEventRecord(done, staging_.to_device_), "cudaEventRecord (copy to device)");
    wait_for(done, deadline, "staging a result back to the device");
  }

 private:
  CudaDeviceStaging& staging_;
  cuda::DeviceGuard guard_;
  size_t copied_to_host_ = 0;
};

CudaDeviceStaging::CudaDeviceStaging(int device, size_t chunk_bytes)
    : device_(device), chunk_bytes_(chunk_bytes) {
  COHORT_CHECK(chunk_bytes_ > 0, "CUDA staging: chunk_bytes must be positive");
  cuda::DeviceGuard guard(device_);
  check_cuda(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking), "cudaStreamCreate");
}

CudaDeviceStaging::~CudaDeviceStaging() {
  int previous = -1;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaStreamSynchronize(to_host_);
  cudaStreamSynchronize(to_device_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaStreamDestroy(to_host_);
  cudaStreamDestroy(to_device_);
  if (area_ != nullptr) cudaFreeHost(area_);
  if (previous >= 0) cudaSetDevice(previous);
}

void CudaDeviceStaging::check_device(int device, const char* what) const {
  COHORT_CHECK(device == device_, what, ": the buffer is on CUDA device ", device,
               ", but this rank's staged group copies from CUDA device ", device_,
               " (CudaStagingOptions::device)");
}

uint8_t* CudaDeviceStaging::host_area(size_t bytes) {
  if (bytes <= area_bytes_) return area_;
  // Grown to at least twice the old size, so that a run of growing calls reallocates rarely.
  const size_t grown = std::max(bytes, 2 * area_bytes_);
  cuda::DeviceGuard guard(device_);
  if (area_ != nullptr) check_cuda(cudaFreeHost(area_), "cudaFreeHost");
  area_ = nullptr;
  area_bytes_ = 0;
  void* area = nullptr;
  check_cuda(cudaHostAlloc(&area, grown, cudaHostAllocPortable), "cudaHostAlloc (staging area)");
  area_ = static_cast<uint8_t*>(area);
  area_bytes_ = grown;
  return area_;
}

std::shared_ptr<DeviceStaging> CudaDeviceStaging::for_subgroup() const {
  return std::make_shared<CudaDeviceStaging>(device_, chunk_bytes_);
}

std::unique_ptr<DeviceCopies> CudaDeviceStaging::begin(int device, void* stream) {
  COHORT_INTERNAL_ASSERT(device == device_, "staging device ", device, " on ", device_);
  return std::make_unique<CudaCopies>(*this, static_cast<cudaStream_t>(stream));
}

cudaEvent_t CudaDeviceStaging::event(size_t index) {
  while (events_.size() <= index) {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    events_.push_back(e);
  }
  return events_[index];
}

}  // namespace cohort
