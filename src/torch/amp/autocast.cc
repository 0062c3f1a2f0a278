#include "cohort/torch/amp/autocast.h"

#include "amp/autocast_compat.h"
#include "cohort/core/error.h"

namespace cohort::amp {
namespace {

// Note [Autocast dtypes]: libtorch 1.13 autocasts a CPU to bfloat16 only (asked for float16 it
// warns and turns autocast off, silently training in float32), and CPUs have no fast float16
// arithmetic; CUDA autocasts to float16 or bfloat16. Anything else is refused here, before
// the first forward.
void check_supported(torch::DeviceType device, torch::ScalarType dtype) {
  if (device == torch::kCPU) {
    if (dtype == torch::kHalf) {
      throw InvalidArgument(
          "cohort::amp::Autocast: float16 autocast on a CPU is not supported by libtorch (it "
          "would silently compute in float32): use torch::kBFloat16 on a CPU (--precision "
          "bf16), float16 on CUDA");
    }
    if (dtype != torch::kBFloat16) {
      throw InvalidArgument(std::string("cohort::amp::Autocast: a CPU autocasts to bfloat16 "
                                        "only, not to ") +
                            c10::toString(dtype));
    }
    return;
  }
  if (device == torch::kCUDA) {
    if (dtype != torch::kHalf && dtype != torch::kBFloat16) {
      throw InvalidArgument(std::string("cohort::amp::Autocast: CUDA autocasts to float16 or "
                                        "bfloat16, not to ") +
                            c10::toString(dtype));
    }
    return;
  }
  throw InvalidArgument(std::string("cohort::amp::Autocast: no autocast for device type ") +
                        c10::DeviceTypeName(device) + ": use torch::kCPU or torch::kCUDA");
}

}  // namespace

Autocast::Autocast(torch::DeviceType device, torch::ScalarType dtype, bool enabled)
    : device_(device) {
  if (enabled) check_supported(device, dtype);
  previous_enabled_ = compat::is_enabled(device);
  previous_dtype_ = compat::get_dtype(device);
  compat::set_enabled(device, enabled);
  if (enabled) compat::set_dtype(device, dtype);
  compat::enter();
}

Autocast::~Autocast() {
  compat::leave();
  compat::set_enabled(device_, previous_enabled_);
  compat::set_dtype(device_, previous_dtype_);
}

bool autocast_enabled(torch::DeviceType device) {
  return compat::is_enabled(device);
}

torch::ScalarType autocast_dtype(torch::DeviceType device) {
  return compat::get_dtype(device);
}

torch::ScalarType precision_dtype(const std::string& name) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kFloat16;
  throw InvalidArgument("unknown precision '" + name + "': use fp32, bf16 or fp16");
}

}  // namespace cohort::amp
