// What a training run computes in (docs/amp.md): autocast for forward, loss scaling for
// float16, and optionally a 16-bit model with float32 master weights. The strategy layer
// (strategy.h) owns one; a loop that wraps its model itself can use it alone.
//
//   float32   no autocast (the default);
//   bfloat16  forward under bfloat16 autocast, parameters, gradients and optimizer in float32;
//             no loss scaling (bfloat16 has float32's exponent range);
//   float16   forward under float16 autocast with a GradScaler (dynamic loss scaling); a CPU
//             cannot compute in float16 (libtorch has no CPU float16 autocast): refused there,
//             naming bfloat16.
#pragma once

#include <torch/torch.h>

#include <string>

#include "cohort/torch/amp/autocast.h"
#include "cohort/torch/amp/grad_scaler.h"

namespace cohort {

struct PrecisionOptions {
  // torch::kFloat32, torch::kBFloat16 or torch::kFloat16.
  torch::ScalarType compute_dtype = torch::kFloat32;
  // The model itself held in compute_dtype, the optimizer updating float32 master weights
  // (under ddp amp::MasterWeights; under the FSDP strategies MixedPrecisionPolicy::param_dtype,
  // whose float32 shards are the masters). Refused with float32 and under zero1 and zero2.
  bool master_weights = false;
  torch::DeviceType device = torch::kCPU;  // where forward runs (what autocast is for)
  // The loss scaler's settings under float16 (loss scaling is off under the others, and where
  // `enabled` is false).
  amp::GradScalerOptions scaler = {};
};

// The options of a precision by the names the examples' --precision takes: "fp32", "bf16",
// "fp16". Throws InvalidArgument for another name.
PrecisionOptions precision_named(const std::string& name, bool master_weights = false,
                                 torch::DeviceType device = torch::kCPU);

// The scope forwards run in under `options` (autocast; a no-op under float32), for code that
// runs forwards before or without a Precision (a planner's probe).
amp::Autocast forward_scope(const PrecisionOptions& options);

class Precision {
 public:
  // Throws InvalidArgument for a dtype other than the three, one `device` cannot compute in
  // (float16 on a CPU), or master weights in float32, saying what to use instead.
  explicit Precision(const PrecisionOptions& options = {});

  const PrecisionOptions& options() const { return options_; }
  bool is_mixed() const { return options_.compute_dtype != torch::kFloat32; }
  // The 16-bit dtype the model is held in under master weights; unset without them.
  c10::optional<torch::ScalarType> master_weights() const {
    if (!options_.master_weights) return c10::nullopt;
    return options_.compute_dtype;
  }
  // The scope forwards run in (training and evaluation); a no-op under float32.
  amp::Autocast forward_scope() const { return cohort::forward_scope(options_); }
  // Enabled under float16 only: a disabled scaler passes the loss, the gradients and the step
  // through, so that one loop serves every precision.
  amp::GradScaler& scaler() { return scaler_; }
  const amp::GradScaler& scaler() const { return scaler_; }
  bool scales_loss() const { return scaler_.is_enabled(); }

 private:
  PrecisionOptions options_;
  amp::GradScaler scaler_;
};

}  // namespace cohort
