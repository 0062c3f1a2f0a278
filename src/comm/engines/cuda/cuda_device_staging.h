// Staging CUDA buffers through page-locked host memory for cohort's own algorithms (Note
// [Staged device buffers] in backends/staging_backend.h): two streams of the group's device,
// one for copies off the device and one for copies onto it, so that both directions and the
// host's work on other chunks overlap; one event per chunk copied to the host.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "backends/device_staging.h"

namespace cohort {

class CudaDeviceStaging final : public DeviceStaging {
 public:
  CudaDeviceStaging(int device, size_t chunk_bytes);
  ~CudaDeviceStaging() override;
  CudaDeviceStaging(const CudaDeviceStaging&) = delete;
  CudaDeviceStaging& operator=(const CudaDeviceStaging&) = delete;

  void check_device(int device, const char* what) const override;
  size_t chunk_bytes() const override { return chunk_bytes_; }
  uint8_t* host_area(size_t bytes) override;
  std::shared_ptr<DeviceStaging> for_subgroup() const override;
  std::unique_ptr<DeviceCopies> begin(int device, void* stream) override;

 private:
  friend class CudaCopies;
  // Event `index` of the pool, made when first needed.
  cudaEvent_t event(size_t index);

  int device_;
  size_t chunk_bytes_;
  cudaStream_t to_host_ = nullptr;
  cudaStream_t to_device_ = nullptr;
  std::vector<cudaEvent_t> events_;
  uint8_t* area_ = nullptr;
  size_t area_bytes_ = 0;
};

}  // namespace cohort
