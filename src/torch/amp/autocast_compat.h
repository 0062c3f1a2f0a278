// libtorch's autocast state, the same calls on 1.13 (Debian) and 2.x: 2.4 replaced the
// per-device functions (set_cpu_enabled, set_autocast_gpu_dtype, ...) by ones that take the
// device type, and later releases removed the old ones. Nothing else in cohort calls
// at::autocast directly.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define COHORT_AUTOCAST_PER_DEVICE_TYPE 1
#endif

namespace cohort::amp::compat {

inline bool is_enabled(c10::DeviceType device) {
#ifdef COHORT_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

inline void set_enabled(c10::DeviceType device, bool enabled) {
#ifdef COHORT_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline at::ScalarType get_dtype(c10::DeviceType device) {
#ifdef COHORT_AUTOCAST_PER_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_dtype(c10::DeviceType device, at::ScalarType dtype) {
#ifdef COHORT_AUTOCAST_PER_DEVICE_TYPE
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

// Leaving the outermost autocast scope drops the casts of the parameters it cached.
inline void enter() {
  at::autocast::increment_nesting();
}
inline void leave() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
}

}  // namespace cohort::amp::compat
