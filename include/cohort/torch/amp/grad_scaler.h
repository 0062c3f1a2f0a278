// cohort::amp::GradScaler: dynamic loss scaling for float16 (and bfloat16) training, with
// PyTorch's torch.amp.GradScaler semantics, on CPUs and GPUs, for one process, DDP, ZeRO and FSDP.
//
//   cohort::amp::GradScaler scaler;                       // scale 2^16, growth x2 every 2000
//   for (auto& batch : *loader) {
//     optimizer.zero_grad();
//     torch::Tensor loss;
//     {
//       cohort::amp::Autocast autocast(torch::kCUDA, torch::kFloat16);
//       loss = loss_fn(model->forward(batch.data), batch.target);
//     }
//     scaler.scale(loss).backward();          // gradients of loss * scale
//     scaler.unscale_(optimizer);             // optional: true gradients, for clipping
//     torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//     scaler.step(optimizer);                 // skipped when a gradient is inf or NaN
//     scaler.update();                        // halve the scale after a skip, else maybe grow it
//   }
//
// Under ZeroDataParallel and FullyShardedDataParallel each rank holds only its shard of the
// gradients, so an overflow is seen by some ranks only: pass the wrapper (or its
// sharded_parameters(), the view these overloads take), and the ranks agree on
// the overflow through one small allreduce per step, or through the gradient-norm allreduce
// itself when clipping with the scaler's clip_grad_norm:
//
//     scaler.scale(loss).backward();
//     scaler.clip_grad_norm(zero, optimizer, 1.0);   // optional: unscale + clip, one allreduce
//     scaler.step(zero, optimizer);                  // steps (and all-gathers) or skips,
//     everywhere scaler.update();
//
// Under DistributedDataParallel the averaged gradients are the same on every rank (an inf or
// NaN on one rank makes the average inf or NaN on all), so every rank takes the same decision
// without communicating: use the optimizer overloads. docs/amp.md.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <unordered_map>

#include "cohort/torch/sharded_parameters.h"

namespace cohort::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // the scale is multiplied by it after growth_interval
  double backoff_factor = 0.5;  //   consecutive steps without inf/NaN, and by this after one
  int64_t growth_interval = 2000;
  // false: scale() returns the loss unchanged, unscale_() does nothing and step() always steps,
  // so that one training loop serves float32 and float16 runs.
  bool enabled = true;
};

// What a checkpoint keeps of a scaler (TrainingState::grad_scaler saves and restores it).
struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // consecutive steps without inf/NaN since the last change
  // What GradScaler::load_state accepts (and checkpoints check before loading anything).
  bool valid() const { return std::isfinite(scale) && scale > 0 && growth_tracker >= 0; }
};

class GradScaler {
 public:
  // Throws InvalidArgument for a scale <= 0, growth_factor <= 1, backoff_factor outside (0, 1)
  // or growth_interval < 1.
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in float32 (as PyTorch: a float16 loss times the float32 scale).
  torch::Tensor scale(const torch::Tensor& loss) const;

  // ---- One process, or DistributedDataParallel.
  // Divides the .grad of every parameter of `optimizer` by the scale, in place, and records
  // whether any was inf or NaN. At most once per optimizer between update()s (InvalidArgument).
  void unscale_(torch::optim::Optimizer& optimizer);
  // optimizer.step() unless that optimizer's gradients held an inf or NaN (unscaling them first
  // if unscale_ was not called). Returns whether it stepped. Once per optimizer per update().
  bool step(torch::optim::Optimizer& optimizer);

  // ---- ZeroDataParallel and FullyShardedDataParallel (ShardedParameters: pass the wrapper),
  // the optimizer over their shards.
  // unscale_ divides this rank's shards of the gradients and records the local finding; the
  // ranks agree in clip_grad_norm or step. Collective: every rank calls the same ones.
  void unscale_(const ShardedParameters& sharded, torch::optim::Optimizer& optimizer);
  // Unscales (unless unscale_ was called), then clips the whole gradient's norm to max_norm as
  // cohort::clip_grad_norm does, reducing the overflow flag in the same allreduce as the norm.
  // Returns the norm before clipping (inf or NaN when some rank overflowed; nothing is clipped
  // then, and step() will skip).
  double clip_grad_norm(const ShardedParameters& sharded, torch::optim::Optimizer& optimizer,
                        double max_norm, double norm_type = 2.0);
  // The wrapper's step(optimizer) unless some rank's shards held an inf or NaN;
  // every rank takes the same decision. Returns whether it stepped.
  bool step(const ShardedParameters& sharded, torch::optim::Optimizer& optimizer);

  // After the step(s) of an iteration: backoff_factor x scale if any optimizer's gradients held
  // an inf or NaN, growth_factor x scale after growth_interval clean steps in a row (unless that
  // would be infinite). InvalidArgument if no optimizer was unscaled or stepped since the last
  // update. update(new_scale) sets the scale instead (the growth count is kept).
  void update();
  void update(double new_scale);

  double get_scale() const;  // 1 when disabled, as PyTorch's get_scale()
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  GradScalerState state() const { return {scale_, growth_tracker_}; }
  // InvalidArgument for a non-finite or non-positive scale or a negative growth count.
  void load_state(const GradScalerState& state);

 private:
  // What one optimizer went through since the last update() (PyTorch's per-optimizer state).
  struct Record {
    bool unscaled = false;
    bool stepped = false;
    bool found_inf = false;
    Group* undecided = nullptr;  // sharded: found_inf is this rank's only, to be reduced here
  };
  // Unscales the optimizer's gradients; `flag_group`: where the finding must still be reduced
  // (null: the gradients are the same on every rank). `call` names the API call in errors.
  Record& unscale(torch::optim::Optimizer& optimizer, Group* flag_group, const char* call);
  // `step` unless an inf or NaN was found (on any rank of flag_group).
  bool step_through(torch::optim::Optimizer& optimizer, Group* flag_group,
                    const std::function<void()>& step);
  void decide(Record& record) const;

  GradScalerOptions options_;
  float scale_;  // float32, as PyTorch's scale tensor: growth and backoff round as it does
  int64_t growth_tracker_ = 0;
  std::unordered_map<const torch::optim::Optimizer*, Record> records_;
};

}  // namespace cohort::amp
