// What a checkpointed region's recomputation must see as its forward saw it (Note [Recompute
// state] in recompute_node.cc): the random-number generators and the autocast state.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <vector>

namespace cohort::activation_checkpoint {

class RngSnapshot {
 public:
  // The states, taken now, of `extra` and, with `defaults`, of the CPU generator and of the
  // default generator of every CUDA device among `inputs` (the devices the region computes on).
  static RngSnapshot take(bool defaults, const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Generator>& extra);

  // Sets every generator this snapshot holds to its saved state.
  void restore() const;

  // The same generators' current states (to put back after a recomputation).
  RngSnapshot current() const;

 private:
  struct Saved {
    at::Generator generator;
    at::Tensor state;
  };
  std::vector<Saved> saved_;
};

// Whether autocast was on, and in which dtype, for the CPU and for CUDA.
struct AutocastSnapshot {
  bool cpu_enabled = false;
  c10::ScalarType cpu_dtype = c10::ScalarType::BFloat16;
  bool cuda_enabled = false;
  c10::ScalarType cuda_dtype = c10::ScalarType::Half;

  static AutocastSnapshot take();
};

// Sets the thread's autocast state to a snapshot's for its lifetime, then puts the previous
// state back (entering an autocast scope, so that the cast cache is the scope's own).
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastSnapshot& snapshot);
  ~AutocastRestore();
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  AutocastSnapshot previous_;
};

}  // namespace cohort::activation_checkpoint
