#include "amp/unscale.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "cohort/core/error.h"

namespace cohort::amp {
namespace {

// Note [Unscale on a CPU]: libtorch 1.13 registers _amp_foreach_non_finite_check_and_unscale_
// for CUDA only. cohort's loop does what that kernel does, element for element: the check is
// on the value before the multiplication, and the multiplication is in float (double for
// double tensors) and rounded back to the tensor's dtype, so half and bfloat16 gradients are
// unscaled exactly as PyTorch's kernel unscales them. `!(|v| <= max)` is true for infinities
// and NaNs alike and lets the compiler vectorize the loop, which std::isfinite does not.
template <typename Scalar, typename Math>
bool unscale_span(Scalar* data, int64_t count, Math inv_scale) {
  constexpr Math kLargest = std::numeric_limits<Math>::max();
  std::atomic<bool> non_finite{false};
  at::parallel_for(0, count, 1 << 16, [&](int64_t begin, int64_t end) {
    bool found = false;
    for (int64_t i = begin; i < end; ++i) {
      const Math value = static_cast<Math>(data[i]);
      found |= !(std::abs(value) <= kLargest);
      if (inv_scale != Math(1)) data[i] = static_cast<Scalar>(value * inv_scale);
    }
    if (found) non_finite.store(true, std::memory_order_relaxed);
  });
  return non_finite.load();
}

bool unscale_cpu_tensor(const torch::Tensor& grad, float inv_scale) {
  if (!grad.is_contiguous()) {  // a strided .grad: the same, in tensor operations
    const bool found = !torch::isfinite(grad).all().item<bool>();
    if (inv_scale != 1.0f) grad.mul_(inv_scale);
    return found;
  }
  bool found = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, grad.scalar_type(), "unscale", [&] {
    using Math = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    found = unscale_span(grad.data_ptr<scalar_t>(), grad.numel(), static_cast<Math>(inv_scale));
  });
  return found;
}

bool unscale_fused(const std::vector<torch::Tensor>& grads, float inv_scale) {
  const auto device = grads.front().device();
  auto found_inf = torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(device));
  auto inv =
      torch::full({1}, inv_scale, torch::TensorOptions().dtype(torch::kFloat).device(device));
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv);
  return found_inf.item<float>() != 0.0f;
}

}  // namespace

bool has_fused_unscale_kernel(torch::DeviceType device) {
  // Kernels are registered when libtorch loads: looked up once, not on every step.
  static const auto registered = [](c10::DispatchKey key) {
    const auto op = c10::Dispatcher::singleton().findSchema(
        {"aten::_amp_foreach_non_finite_check_and_unscale_", ""});
    return op.has_value() && op->hasKernelForDispatchKey(key);
  };
  static const bool cpu = registered(c10::DispatchKey::CPU);
  static const bool cuda = registered(c10::DispatchKey::CUDA);
  if (device == torch::kCPU) return cpu;
  return device == torch::kCUDA && cuda;
}

bool unscale_and_find_non_finite(const std::vector<torch::Tensor>& grads, float inv_scale) {
  torch::NoGradGuard no_grad;
  // The fused kernel takes tensors of one device and dtype, as PyTorch's GradScaler groups them.
  std::map<std::pair<std::string, torch::ScalarType>, std::vector<torch::Tensor>> groups;
  for (const auto& grad : grads) {
    if (!grad.defined()) continue;
    if (grad.is_sparse()) {
      throw InvalidArgument(
          "GradScaler: sparse gradients are not supported (unscale_ works on dense .grad); "
          "train the sparse parameters outside the scaler or make their gradients dense");
    }
    groups[{grad.device().str(), grad.scalar_type()}].push_back(grad);
  }
  bool found = false;
  for (auto& [key, tensors] : groups) {
    const auto device = tensors.front().device().type();
    if (has_fused_unscale_kernel(device)) {
      found |= unscale_fused(tensors, inv_scale);
    } else if (device == torch::kCPU) {
      for (const auto& grad : tensors) found |= unscale_cpu_tensor(grad, inv_scale);
    } else {
      throw InvalidArgument("GradScaler: libtorch has no unscale kernel for gradients on " +
                            key.first);
    }
  }
  return found;
}

}  // namespace cohort::amp
