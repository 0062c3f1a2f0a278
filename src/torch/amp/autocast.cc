#include "cohort/torch/amp/autocast.h"

#include <mutex>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "amp/autocast_compat.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"

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

// Issue 35: on a CPU without native bfloat16 an Autocast made training many times slower, and
// nothing said why.
void warn_once_if_emulated(torch::DeviceType device, torch::ScalarType dtype) {
  if (device != torch::kCPU || dtype != torch::kBFloat16 || cpu_has_native_bfloat16()) return;
  static std::once_flag warned;
  std::call_once(warned, [] {
    COHORT_LOG(kWarn,
               "cohort::amp::Autocast: this CPU has no native bfloat16 (neither avx512_bf16 nor "
               "amx_bf16): libtorch emulates bfloat16 matmuls, 3.5x to 70x slower than float32. "
               "Train in float32 here (--precision fp32) unless memory is what you need "
               "(docs/amp.md, \"bfloat16 on a CPU without native bfloat16\")");
  });
}

}  // namespace

bool cpu_has_native_bfloat16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amx_bf16 = (edx >> 22) & 1u;
  const unsigned max_subleaf = eax;
  bool avx512_bf16 = false;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0) {
    avx512_bf16 = (eax >> 5) & 1u;
  }
  return avx512_bf16 || amx_bf16;
#else
  return true;  // not checked on other CPUs (header)
#endif
}

Autocast::Autocast(torch::DeviceType device, torch::ScalarType dtype, bool enabled)
    : device_(device) {
  if (enabled) {
    check_supported(device, dtype);
    warn_once_if_emulated(device, dtype);
  }
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
