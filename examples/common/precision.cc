#include "precision.h"

#include <CLI/CLI.hpp>

namespace cohort_examples {

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

cohort::PrecisionOptions checked_precision(const std::string& name, bool master_weights) {
  cohort::PrecisionOptions options = cohort::precision_named(name, master_weights, torch::kCPU);
  const cohort::Precision check(options);  // throws for what cannot be trained
  return options;
}

}  // namespace cohort_examples
