// cohort::Strategy: one model trained data parallel under any StrategyKind, with the precision,
// activation checkpointing, SyncBatchNorm, communication hooks and checkpoints a run asks for
// (docs/strategy.md). The one place that knows how each strategy wraps a model: the examples,
// the planner's plan_run (whose RunPlan::applied gives its options) and user programs all
// make their runs through make_strategy.
//
//   cohort::StrategyOptions options;
//   options.precision = cohort::precision_named("bf16");
//   auto run = cohort::make_strategy(cohort::StrategyKind::kFullShard, model, group, options);
//   torch::optim::AdamW optimizer(run->optimizer_parameters().values(), 1e-3);
//   for (auto& batch : *loader) {
//     run->zero_grad(optimizer);
//     torch::Tensor loss;
//     {
//       auto autocast = run->forward_scope();
//       loss = torch::nll_loss(model->forward(batch.data), batch.target);
//     }
//     run->backward(loss);                    // scaled under float16
//     run->clip_gradients(optimizer, 1.0);    // optional: the whole model's norm
//     run->step(optimizer);                   // skipped everywhere after an overflow
//   }
//   run->save("ckpt", state);                 // one file (ddp) or a sharded directory
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/activation_checkpoint/checkpoint_modules.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/local_sgd/diloco.h"
#include "cohort/torch/local_sgd/local_sgd.h"
#include "cohort/torch/optim/trust_ratio.h"
#include "cohort/torch/strategy/checkpoint_writer.h"
#include "cohort/torch/strategy/precision.h"
#include "cohort/torch/strategy/strategy_kind.h"

namespace cohort {

struct StrategyOptions {
  PrecisionOptions precision;          // float32 by default
  double bucket_cap_mb = 25.0;         // DDP's and ZeRO's gradient buckets
  double first_bucket_cap_mb = 1.0;    // DDP's first bucket
  std::shared_ptr<Timeline> timeline;  // where communication is recorded; may be null
  // FSDP's units besides the children of every Sequential and ModuleList: any submodule of at
  // least this many parameter elements (AutoWrapPolicy::min_parameters); 0: none.
  int64_t fsdp_min_unit_parameters = 0;
  bool fsdp_prefetch = true;  // FSDP's forward_prefetch and backward_prefetch
  // Every BatchNorm of the model replaced by a SyncBatchNorm over the group (before wrapping;
  // the root itself may be replaced: use Strategy::model()). Refused for a model without one.
  bool sync_batchnorm = false;
  // Regions of the model recomputed in backward instead of kept (checkpoint_modules), applied
  // after the SyncBatchNorm conversion and before wrapping.
  std::optional<CheckpointPolicy> activation_checkpointing;
  // ddp only (the others shard the gradients): how buckets are reduced (null: the averaging
  // allreduce); with DiLoCo, how its rounds travel (DiLoCoOptions::hook, when that is unset).
  std::shared_ptr<CommHook> comm_hook;
  // ddp only: local SGD, the models averaged every `period` steps after `warmup_steps` of
  // ordinary DDP (post-local SGD; docs/compression.md). Not with a comm hook, master weights or
  // DiLoCo.
  std::optional<LocalSgdOptions> local_sgd;
  // ddp only: DiLoCo instead of the gradient allreduce (no communication in backward; the
  // model's change averaged every inner_steps steps). Hierarchical: DDP inside each node and
  // DiLoCo across nodes. Not with local SGD or master weights.
  std::optional<DiLoCoOptions> diloco;
  // Checkpoints written in the background, training waiting before its optimizer step only
  // while a save still reads the parameters; false: written before save() returns.
  bool background_checkpoints = true;
};

// Bytes one rank holds of the model's training state.
struct ModelStateBytes {
  int64_t parameters = 0;     // whole parameters (DDP, ZeRO) or this rank's shards (FSDP)
  int64_t peak_gathered = 0;  // FSDP: the most bytes of whole units held at once
  int64_t gradients = 0;
  int64_t peak_gradients = 0;  // ZeRO, FSDP: the most gradient bytes held at once (in backward)
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + peak_gathered + gradients + optimizer_state; }
};

// What the last step's gradient synchronization cost (DDP's IterationStats, docs/ddp.md).
struct StepCommunication {
  double exposed_ms = 0;                  // the time backward waited for it
  std::vector<double> bucket_latency_ms;  // per bucket (FSDP: per unit), in reduction order
  std::vector<double> bucket_comm_ms;     // the same reductions' time on the wire
  int64_t reduced_bytes = 0;              // what the step sent: buckets, averaging, DiLoCo
};

class Strategy {
 public:
  virtual ~Strategy();
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  StrategyKind kind() const { return kind_; }
  // The model as trained: the one given, or under sync_batchnorm a new root where the root
  // itself was a BatchNorm.
  const std::shared_ptr<torch::nn::Module>& model() const { return model_; }
  Group& group() const { return *group_; }
  // The regions activation_checkpointing chose, by path, in forward order.
  const std::vector<std::string>& checkpointed_regions() const { return regions_; }
  Precision& precision() { return precision_; }

  // The tensors to build the optimizer over, under the names of the model's parameters they
  // stand for (ddp: the parameters, or their float32 masters under master weights; ZeRO and
  // FSDP: this rank's 1-D shards of them).
  virtual torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const = 0;
  // What LARS and LAMB need to sum per-tensor norms over the shards of a tensor; none where
  // the tensors are whole (ddp).
  virtual optim::NormReduction norm_reduction() { return {}; }

  // ---- A training step, in this order:
  // Clears the gradients (the model's too, where the optimizer holds masters).
  virtual void zero_grad(torch::optim::Optimizer& optimizer);
  // The scope forward runs in (autocast under a 16-bit precision; a no-op under float32).
  amp::Autocast forward_scope() const { return precision_.forward_scope(); }
  // loss.backward(), the loss scaled under float16.
  void backward(const torch::Tensor& loss);
  // Optional: unscales the gradients and scales them so that the 2-norm of the whole model's
  // gradient is at most `max_norm` (the same on every rank); returns the norm before clipping
  // (inf or NaN when the gradients overflowed).
  virtual double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm) = 0;
  // The optimizer's step (skipped on every rank when a gradient overflowed under float16),
  // what must follow it before the next forward (local SGD's and DiLoCo's rounds, ZeRO's
  // all-gather), and the loss scale's update. Waits first for a background checkpoint still
  // reading the parameters. Returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer);

  // What the last step communicated.
  virtual StepCommunication last_step_communication() const = 0;
  // Buckets of this cap from the next step (ddp: DistributedDataParallel::rebucket). Returns
  // false where the strategy cannot change them.
  virtual bool rebucket(double /*bucket_cap_mb*/) { return false; }
  // Makes the replicas equal where they may differ (local SGD averages them now; DiLoCo
  // synchronizes every fragment not yet synchronized): before an evaluation or a checkpoint
  // that every rank takes of the same model. An update, like step(). Collective.
  virtual void synchronize(torch::optim::Optimizer& /*optimizer*/) {}
  // This rank's model state.
  virtual ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const = 0;
  // Whole parameters on every rank for as long as the returned object lives, so that forwards
  // need not be the same on every rank (each rank evaluating its own slice). FSDP gathers
  // every unit (collective); the others hold whole parameters already (null).
  virtual std::shared_ptr<void> whole_parameters() { return nullptr; }

  // ---- Checkpoints (docs/checkpoints.md). `state` names the model (model() or one holding
  // the same parameters), optimizer, sampler and counters; the strategy adds what it keeps
  // itself (the loss scale, master weights, DiLoCo's outer state). ddp writes one file; ZeRO
  // and FSDP a sharded checkpoint, a directory that loads at any number of ranks and under any
  // sharded strategy. Collective.
  // Loads the checkpoint at `path` as LoadOptions say; returns whether one was loaded.
  virtual bool load(const std::string& path, TrainingState& state,
                    const LoadOptions& options = {}) = 0;
  // Saves, in the background unless StrategyOptions::background_checkpoints is false.
  virtual void save(const std::string& path, const TrainingState& state) = 0;
  // Waits for a checkpoint still being written and throws its error. Collective.
  void finish_checkpoints() { checkpoints_.finish(); }
  CheckpointWriterStats checkpoint_stats() const { return checkpoints_.stats(); }

 protected:
  // Prepares the model: SyncBatchNorm conversion, then activation checkpointing.
  Strategy(StrategyKind kind, std::shared_ptr<torch::nn::Module> model,
           std::shared_ptr<Group> group, const StrategyOptions& options);
  // The optimizer's step through the scaler, and what must follow it.
  virtual bool step_optimizer(torch::optim::Optimizer& optimizer, amp::GradScaler& scaler) = 0;
  // `state` with the loss scaler added under float16.
  TrainingState with_scaler(const TrainingState& state);
  CheckpointWriter& checkpoints() { return checkpoints_; }
  const std::shared_ptr<Group>& group_ptr() const { return group_; }

 private:
  StrategyKind kind_;
  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<Group> group_;
  Precision precision_;
  std::vector<std::string> regions_;
  CheckpointWriter checkpoints_;
};

// Throws InvalidArgument, naming the options, for a combination `kind` cannot train: a comm
// hook, local SGD or DiLoCo outside ddp, master weights under ZeRO, local SGD with a comm hook,
// master weights or DiLoCo, DiLoCo with master weights, a compression hook with master
// weights.
void check_strategy_options(StrategyKind kind, const StrategyOptions& options);

// The kinds check_strategy_options accepts with `options` (what the planner chooses among).
std::vector<StrategyKind> strategies_allowed(const StrategyOptions& options);

// Collective over `group`: prepares `model` (whose weights must be the same on every rank, or
// rank 0's are taken) and wraps it under `kind`.
std::unique_ptr<Strategy> make_strategy(StrategyKind kind, std::shared_ptr<torch::nn::Module> model,
                                        std::shared_ptr<Group> group,
                                        const StrategyOptions& options = {});

// As above, for a torch::nn::ModuleHolder (a model declared with TORCH_MODULE).
template <typename ModuleType>
std::unique_ptr<Strategy> make_strategy(StrategyKind kind,
                                        const torch::nn::ModuleHolder<ModuleType>& model,
                                        std::shared_ptr<Group> group,
                                        const StrategyOptions& options = {}) {
  return make_strategy(kind, std::static_pointer_cast<torch::nn::Module>(model.ptr()),
                       std::move(group), options);
}

}  // namespace cohort
