// cohort::amp::MasterWeights: a model held in bfloat16 (or float16) whose optimizer updates float32
// master copies of its parameters (apex's O2). The model computes and communicates in 16-bit;
// the update, where small steps would round away in 16-bit, happens in float32.
//
//   auto model = std::make_shared<Net>();
//   cohort::amp::MasterWeights master(model, torch::kBFloat16);  // FIRST: the model becomes bf16
//   cohort::DistributedDataParallel ddp(model, group);           // then DDP: bf16 buckets
//   torch::optim::AdamW adamw(master.parameters(), torch::optim::AdamWOptions(1e-3));
//   for (auto& batch : *loader) {
//     master.zero_grad();
//     torch::nll_loss(model->forward(batch.data.to(torch::kBFloat16)), batch.target).backward();
//     master.step(adamw);  // bf16 grads -> float32 masters, adamw.step(), masters -> bf16 model
//   }
//
// docs/amp.md, "Master weights".
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace cohort::amp {

class GradScaler;

class MasterWeights {
 public:
  // Converts every floating-point parameter and buffer of `module` to `dtype` in place: the
  // tensors stay the same objects (their data is replaced), so what holds them (a DDP built
  // afterwards, the module's own references) sees 16-bit tensors. Buffers are converted too
  // (BatchNorm's running statistics): libtorch's CPU batch_norm refuses a bfloat16 input with
  // float32 statistics. Keeps a float32 copy of every parameter that requires grad: the masters,
  // which start as the 16-bit values (the model rounded first, as apex does) and are taken from
  // the model once more at the first copy_gradients_to_masters() or step(): that picks up rank
  // 0's parameters, which DDP's constructor broadcasts, the same way on every rank.
  // Throws InvalidArgument when `dtype` is not torch::kBFloat16 or torch::kFloat16, and when the
  // module's parameters already belong to a DistributedDataParallel, ZeroDataParallel or
  // FullyShardedDataParallel (build MasterWeights first, then the wrapper).
  explicit MasterWeights(std::shared_ptr<torch::nn::Module> module,
                         torch::Dtype dtype = torch::kBFloat16);
  template <typename ModuleType>
  explicit MasterWeights(const torch::nn::ModuleHolder<ModuleType>& module,
                         torch::Dtype dtype = torch::kBFloat16)
      : MasterWeights(std::static_pointer_cast<torch::nn::Module>(module.ptr()), dtype) {}

  // The float32 masters, in the module's parameter order (frozen parameters left out): build
  // the optimizer over these, never over the module's own (16-bit) parameters.
  std::vector<torch::Tensor> parameters() const { return masters_; }
  torch::OrderedDict<std::string, torch::Tensor> named_parameters() const;

  // ---- The pieces of step(), for code that works on the float32 gradients in between:
  //   master.copy_gradients_to_masters();
  //   scaler.unscale_(optimizer);                                 // the masters' gradients
  //   torch::nn::utils::clip_grad_norm_(master.parameters(), 1.0);
  //   master.step(optimizer, &scaler);                            // does not copy them again
  //
  // Each master's .grad becomes its model parameter's .grad (the DDP-averaged one under DDP)
  // in float32; undefined where the model's is (the optimizer skips it). An inf or NaN stays one.
  void copy_gradients_to_masters();
  // Rounds the masters into the model's 16-bit parameters (after an optimizer step).
  void copy_masters_to_model();
  // The masters become the model's values: after writing the model yourself later on (loading
  // a checkpoint into it), so that the next step starts from what was written.
  void copy_model_to_masters();

  // Copies the gradients (unless copy_gradients_to_masters() was called since the last step),
  // steps `optimizer` (through scaler->step(optimizer) when a scaler is given: it unscales the
  // masters' gradients and skips the step on an inf or NaN, leaving masters and model as they
  // were), writes the masters into the model when it stepped, and releases the masters'
  // gradients (steady state: no float32 gradient is kept between steps). Returns whether it
  // stepped. Throws InvalidArgument when `optimizer` holds a tensor that is not a master. With
  // a scaler, call scaler->update() afterwards as usual.
  bool step(torch::optim::Optimizer& optimizer, GradScaler* scaler = nullptr);

  // Zeroes the model's 16-bit gradients (in place, so DDP's bucket views stay) and releases the
  // masters'. Use it instead of optimizer.zero_grad(), which sees only the masters.
  void zero_grad();

  // ---- Checkpoints (checkpoint.h). The model holds only the 16-bit rounding of the masters, so
  // a checkpoint of it would lose what the masters add. checkpoint_module() is a module with
  // the model's names whose trainable parameters are the float32 masters (frozen parameters and
  // buffers: the model's own tensors): pass it as TrainingState::module, with the optimizer over
  // the masters. After a load into it, call loaded_into_masters(): the masters are then the
  // loaded values and the model their rounding, and a resumed run goes on as the uninterrupted
  // one. The file holds float32 parameters, so a float32 run can resume it too.
  std::shared_ptr<torch::nn::Module> checkpoint_module();
  void loaded_into_masters();

  torch::Dtype dtype() const { return dtype_; }
  torch::nn::Module& module() const { return *module_; }

 private:
  void check_optimizer(const torch::optim::Optimizer& optimizer) const;
  void release_master_gradients();

  std::shared_ptr<torch::nn::Module> module_;
  torch::Dtype dtype_;
  std::vector<std::string> names_;      // of the trainable parameters
  std::vector<torch::Tensor> model_;    // the module's trainable parameters (16-bit)
  std::vector<torch::Tensor> masters_;  // float32 leaves, what the optimizer updates
  bool gradients_copied_ = false;       // since the last step
  bool synced_ = false;                 // the masters were taken from the model since built
  std::shared_ptr<torch::nn::Module> checkpoint_module_;  // built on first use
};

}  // namespace cohort::amp
