// The examples' --precision (docs/amp.md): in which dtype forward computes, and whether the
// loss is scaled: the library's cohort::Precision (cohort/torch/strategy/precision.h), by name.
//
//   fp32  float32 everywhere (the default);
//   bf16  forward under bfloat16 autocast (matmuls and convolutions in bfloat16, parameters,
//         gradients and the optimizer in float32); no loss scaling: bfloat16 has float32's
//         exponent range, so gradients do not underflow;
//   fp16  forward under float16 autocast with a GradScaler (dynamic loss scaling, saved in the
//         checkpoints); a CPU cannot compute in float16 (libtorch has no CPU float16 autocast),
//         so on a CPU it is refused with an error that names bf16.
// --master-weights (with bf16 or fp16) also holds the model itself in that dtype, with float32
// master weights that the optimizer updates (cohort::PrecisionOptions::master_weights).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/torch/strategy/precision.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cohort_examples {

inline const std::vector<std::string> kPrecisionNames = {"fp32", "bf16", "fp16"};

// Adds --precision (checked against kPrecisionNames) and --master-weights to `app`.
void add_precision_options(CLI::App& app, std::string& precision, bool& master_weights);

// The precision of --precision `name` and --master-weights on a CPU. Throws
// cohort::InvalidArgument for one the CPU cannot train in (fp16) or master weights in fp32,
// saying what to give instead.
cohort::PrecisionOptions checked_precision(const std::string& name, bool master_weights);

}  // namespace cohort_examples
