#include "precision.h"

#include <CLI/CLI.hpp>

#include "cohort/core/error.h"

namespace cohort_examples {
namespace {

cohort::amp::GradScalerOptions scaler_options(const std::string& name) {
  cohort::amp::GradScalerOptions options;
  options.enabled = name == "fp16";
  return options;
}

}  // namespace

void add_precision_options(CLI::App& app, std::string& precision, bool& master_weights) {
  app.add_option("--precision", precision,
                 "fp32; bf16 (bfloat16 autocast: matmuls and convolutions in bfloat16); fp16 "
                 "(float16 autocast with dynamic loss scaling; CUDA only)")
      ->check(CLI::IsMember(kPrecisionNames))
      ->capture_default_str();
  app.add_flag("--master-weights", master_weights,
               "Hold the model in the --precision dtype with float32 master weights that the "
               "optimizer updates (ddp and the FSDP strategies)");
}

Precision::Precision(const std::string& name, torch::DeviceType device, bool master_weights)
    : name_(name), device_(device), master_weights_(master_weights), scaler_(scaler_options(name)) {
  cohort::amp::precision_dtype(name);  // an unknown name throws, naming the known ones
  if (master_weights_ && name_ == "fp32") {
    throw cohort::InvalidArgument(
        "--master-weights holds the model in 16-bit with float32 master weights: give it with "
        "--precision bf16 (or fp16 on CUDA)");
  }
  if (name_ != "fp32") {
    // Asks libtorch's autocast for the dtype once, now: fp16 on a CPU throws here, naming bf16,
    // instead of in the first forward.
    const cohort::amp::Autocast probe(device_, compute_dtype());
  }
}

torch::ScalarType Precision::compute_dtype() const {
  return name_ == "fp32" ? torch::kBFloat16  // unused: the scope is disabled
                         : cohort::amp::precision_dtype(name_);
}

}  // namespace cohort_examples
