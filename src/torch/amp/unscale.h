// Dividing gradients by the loss scale and finding infinities and NaNs among them: what
// GradScaler::unscale_ does to each optimizer's gradients.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace cohort::amp {

// Multiplies every defined tensor of `grads` in place by inv_scale (skipped when it is 1) and
// returns whether any element was infinite or NaN before the multiplication. Uses libtorch's
// fused kernel (_amp_foreach_non_finite_check_and_unscale_) on devices that have one (CUDA;
// CPU from libtorch 2.x), cohort's own loop on a CPU without it (Note [Unscale on a CPU]).
bool unscale_and_find_non_finite(const std::vector<torch::Tensor>& grads, float inv_scale);

// Whether libtorch has the fused kernel for tensors of `device` (tests and docs/amp.md).
bool has_fused_unscale_kernel(torch::DeviceType device);

}  // namespace cohort::amp
