// cohort::amp::Autocast: libtorch's automatic mixed precision for a scope, the C++ form of
// Python's `with torch.autocast(device_type, dtype):`.
//
//   {
//     cohort::amp::Autocast autocast(torch::kCPU, torch::kBFloat16);
//     loss = loss_fn(model->forward(input), target);  // matmuls and convolutions in bfloat16
//   }
//   loss.backward();  // outside the scope, as in PyTorch: backward runs in the dtypes forward
//   chose
//
// Inside the scope libtorch runs the operators on its autocast list (matmul, linear,
// convolution, ...) in `dtype` and keeps the others (softmax, losses, norms, reductions) in
// float32; parameters stay float32 and are cast per use (cached for the scope). The guard saves
// the previous state and restores it on exit, so guards nest. The state is per thread, as
// libtorch's. docs/amp.md says which dtypes each device supports and what to expect on a CPU.
#pragma once

#include <torch/torch.h>

#include <string>

namespace cohort::amp {

class Autocast {
 public:
  // device: torch::kCPU (dtype torch::kBFloat16) or torch::kCUDA (torch::kFloat16 or
  // torch::kBFloat16). enabled = false makes the guard a no-op, so that one code path serves
  // float32 and mixed-precision runs. Throws InvalidArgument for a device or dtype libtorch
  // cannot autocast to (float16 on a CPU: use bfloat16), naming what to use instead.
  explicit Autocast(torch::DeviceType device = torch::kCPU,
                    torch::ScalarType dtype = torch::kBFloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  torch::DeviceType device_;
  bool previous_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kFloat32;
};

// Whether this CPU has native bfloat16 arithmetic (avx512_bf16 or amx_bf16, as /proc/cpuinfo
// names them). Without it libtorch 1.13 emulates bfloat16 matmuls, 3.5x to 70x slower than
// float32 (docs/amp.md, "bfloat16 on a CPU without native bfloat16"); a CPU Autocast in
// bfloat16 then warns once per process, saying so. Checked on x86 only (elsewhere: true).
bool cpu_has_native_bfloat16();

// Whether autocast is on for `device` in this thread, and in which dtype.
bool autocast_enabled(torch::DeviceType device);
torch::ScalarType autocast_dtype(torch::DeviceType device);

// The dtype a training precision computes in ("fp32", "bf16", "fp16", as the examples'
// --precision takes them); throws InvalidArgument for another name.
torch::ScalarType precision_dtype(const std::string& name);

}  // namespace cohort::amp
