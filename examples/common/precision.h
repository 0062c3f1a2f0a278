// The examples' --precision (docs/amp.md): in which dtype forward computes, and whether the
// loss is scaled. The one place the examples' trainers ask about mixed precision.
//
//   fp32  float32 everywhere (the default);
//   bf16  forward under bfloat16 autocast (matmuls and convolutions in bfloat16, parameters,
//         gradients and the optimizer in float32); no loss scaling: bfloat16 has float32's
//         exponent range, so gradients do not underflow;
//   fp16  forward under float16 autocast with a GradScaler (dynamic loss scaling, saved in the
//         checkpoints); a CPU cannot compute in float16 (libtorch has no CPU float16 autocast),
//         so on a CPU it is refused with an error that names bf16.
// --master-weights (with bf16 or fp16) also holds the model itself in that dtype, with float32
// master weights that the optimizer updates (StrategyOptions::master_weights).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/torch/amp/autocast.h"
#include "cohort/torch/amp/grad_scaler.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cohort_examples {

inline const std::vector<std::string> kPrecisionNames = {"fp32", "bf16", "fp16"};

// Adds --precision (checked against kPrecisionNames) and --master-weights to `app`.
void add_precision_options(CLI::App& app, std::string& precision, bool& master_weights);

class Precision {
 public:
  // Throws cohort::InvalidArgument for a name not in kPrecisionNames, one `device` cannot
  // compute in (fp16 on a CPU), or master_weights under fp32, saying what to use instead.
  Precision(const std::string& name, torch::DeviceType device, bool master_weights = false);

  // --master-weights: the 16-bit dtype the model is held in (StrategyOptions::master_weights);
  // unset without it.
  c10::optional<torch::ScalarType> master_weights() const {
    if (!master_weights_) return c10::nullopt;
    return compute_dtype();
  }

  // The scope forwards run in (training and evaluation); a no-op under fp32.
  cohort::amp::Autocast forward_scope() const {
    return cohort::amp::Autocast(device_, compute_dtype(), name_ != "fp32");
  }
  // Enabled under fp16 only; a disabled scaler passes the loss, the gradients and the step
  // through, so that the trainers have one code path.
  cohort::amp::GradScaler& scaler() { return scaler_; }
  bool scales_loss() const { return scaler_.is_enabled(); }

 private:
  torch::ScalarType compute_dtype() const;

  std::string name_;
  torch::DeviceType device_;
  bool master_weights_;
  cohort::amp::GradScaler scaler_;
};

}  // namespace cohort_examples
