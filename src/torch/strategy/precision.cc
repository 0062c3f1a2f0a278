#include "cohort/torch/strategy/precision.h"

#include "cohort/core/error.h"

namespace cohort {
namespace {

amp::GradScalerOptions scaler_options(const PrecisionOptions& options) {
  amp::GradScalerOptions scaler = options.scaler;
  scaler.enabled = scaler.enabled && options.compute_dtype == torch::kFloat16;
  return scaler;
}

}  // namespace

PrecisionOptions precision_named(const std::string& name, bool master_weights,
                                 torch::DeviceType device) {
  PrecisionOptions options;
  options.compute_dtype = amp::precision_dtype(name);  // an unknown name throws, naming the others
  options.master_weights = master_weights;
  options.device = device;
  return options;
}

amp::Autocast forward_scope(const PrecisionOptions& options) {
  const bool mixed = options.compute_dtype != torch::kFloat32;
  return amp::Autocast(options.device, mixed ? options.compute_dtype : torch::kBFloat16, mixed);
}

Precision::Precision(const PrecisionOptions& options)
    : options_(options), scaler_(scaler_options(options)) {
  const torch::ScalarType dtype = options_.compute_dtype;
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    throw InvalidArgument(std::string("PrecisionOptions::compute_dtype ") + c10::toString(dtype) +
                          " is not a training precision: give Float (fp32), BFloat16 (bf16) or "
                          "Half (fp16)");
  }
  if (options_.master_weights && !is_mixed()) {
    throw InvalidArgument(
        "master weights (--master-weights, PrecisionOptions::master_weights) hold the model in "
        "16-bit with float32 master weights: give it with --precision bf16 (compute_dtype "
        "BFloat16), or fp16 on CUDA");
  }
  // Asks libtorch's autocast for the dtype once, now: float16 on a CPU throws here, naming
  // bfloat16, instead of in the first forward.
  if (is_mixed()) {
    const amp::Autocast probe(options_.device, dtype);
  }
}

}  // namespace cohort
