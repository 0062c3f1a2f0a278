// How an example's model is made data parallel (--strategy): the one place that knows. The
// trainer builds its optimizer over what the strategy gives it, calls it after backward
// (clipping) and for the optimizer step, asks it what the last step communicated and what the
// model state costs in memory, and lets it save and load checkpoints.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "checkpointing.h"
#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "cohort/torch/optim/trust_ratio.h"
#include "diloco_options.h"
#include "memory.h"

namespace cohort_examples {

// Every name --strategy takes (docs/sharding.md, docs/fsdp.md).
inline const std::vector<std::string> kStrategyNames = {
    "ddp", "zero1", "zero2", "full_shard", "shard_grad_op", "hybrid_shard"};

// What --strategy takes: kStrategyNames and "auto" (the planner's choice, auto_plan.h).
std::vector<std::string> strategy_choices();

// The --strategy help text: the names and what each is.
std::string strategy_help();

struct StrategyOptions {
  double bucket_cap_mb = 25.0;                 // gradient bucket size (DDP, ZeRO)
  double first_bucket_cap_mb = 1.0;            // DDP's first bucket (the planner's choice)
  std::shared_ptr<cohort::Timeline> timeline;  // where communication is recorded; may be null
  // FSDP's units besides the children of every Sequential and ModuleList: any submodule of at
  // least this many parameter elements (AutoWrapPolicy::min_parameters); 0: none.
  int64_t fsdp_min_unit_parameters = 0;
  // FSDP's forward_prefetch and backward_prefetch (the planner may turn them off to save memory).
  bool fsdp_prefetch = true;
  // --master-weights: the model held in this 16-bit dtype, the optimizer updating float32
  // master weights (docs/amp.md): under ddp cohort::amp::MasterWeights, under the FSDP
  // strategies MixedPrecisionPolicy::param_dtype (the float32 shards are the masters); refused
  // under zero1 and zero2. Unset: the model stays float32.
  c10::optional<torch::ScalarType> master_weights;
  // ddp only (refused by the others): how buckets are reduced (null: averaging allreduce), and
  // local SGD (period > 0: the models are averaged every `period` steps after `warmup` steps
  // of ordinary DDP; docs/compression.md). Not both.
  std::shared_ptr<cohort::CommHook> comm_hook;
  int64_t local_sgd_period = 0;
  int64_t local_sgd_warmup = 0;
  // ddp only: DiLoCo instead of the gradient allreduce (no communication in backward; the
  // model's change averaged every diloco.inner_steps steps, through comm_hook when it is set).
  // Not with local SGD.
  DiLoCoSettings diloco;
  // Checkpoints written in the background (cohort::AsyncCheckpointer), training waiting before
  // its optimizer step only while a save still reads the parameters; false: --sync-checkpoint.
  bool background_checkpoints = true;
};

// What the last step's gradient synchronization cost (DDP's IterationStats, docs/ddp.md).
struct StepCommunication {
  double exposed_ms = 0;                  // the time backward waited for it
  std::vector<double> bucket_latency_ms;  // per bucket (FSDP: per unit), in reduction order
  std::vector<double> bucket_comm_ms;     // the same reductions' time on the wire
  int64_t reduced_bytes = 0;              // what the buckets' reductions took in, summed
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The tensors to build the optimizer over, under the names of the model's parameters they
  // stand for (DDP: the parameters themselves, or their float32 masters under --master-weights;
  // ZeRO and FSDP: this rank's 1-D shards of them).
  virtual torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const = 0;
  // What LARS and LAMB need to sum their per-tensor norms over the shards of a tensor (ZeRO,
  // FSDP: cohort::optim::shard_norm_reduction); none where the tensors are whole (DDP).
  virtual cohort::optim::NormReduction norm_reduction() { return {}; }
  // Before forward: clears the gradients (the model's too, where the optimizer holds masters).
  virtual void zero_grad(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
  // After backward: unscales the gradients (when `scaler` is enabled: --precision fp16), then
  // scales them so that the 2-norm of the whole model's gradient is at most `max_norm` (the same
  // on every rank); returns the norm before clipping (inf or NaN when the gradients overflowed).
  virtual double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm,
                                cohort::amp::GradScaler& scaler) = 0;
  // The optimizer's step through the scaler (skipped on every rank when a gradient overflowed),
  // and whatever must follow it before the next forward. Returns whether it stepped.
  virtual bool step(torch::optim::Optimizer& optimizer, cohort::amp::GradScaler& scaler) = 0;
  virtual StepCommunication last_step_communication() const = 0;
  // Buckets of this cap from the next step (DDP: DistributedDataParallel::rebucket; the
  // planner's online correction). Returns false where the strategy cannot change them.
  virtual bool rebucket(double /*bucket_cap_mb*/) { return false; }
  // At the end of an epoch, before evaluation and the checkpoint: makes the replicas equal
  // where they may differ (local SGD averages them now; DiLoCo synchronizes every fragment), an
  // update like step(), so it first waits for a background checkpoint still reading the
  // parameters. Collective.
  virtual void end_epoch(torch::optim::Optimizer& /*optimizer*/) {}
  // This rank's model state.
  virtual ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const = 0;
  // Whole parameters on every rank for as long as the returned object lives, so that forwards
  // need not be the same on every rank (evaluation of each rank's own slice). FSDP gathers
  // every unit (collective); the others hold whole parameters already (null).
  virtual std::shared_ptr<void> whole_parameters() { return nullptr; }
  // The checkpoint idiom of the examples (checkpointing.h): DDP saves one file; ZeRO and
  // FSDP a sharded checkpoint, a directory at `path` that loads at any number of ranks and
  // under any strategy (docs/checkpoints.md). Collective.
  virtual bool resume(const std::string& path, const cohort::LoadOptions& options,
                      cohort::TrainingState& state) = 0;
  virtual void save(const std::string& path, const cohort::TrainingState& state,
                    cohort::DistributedSampler& sampler, bool epoch_finished) = 0;
  // At the end of the run: waits for a checkpoint still being written in the background, and
  // throws its error. Collective.
  virtual void finish_checkpoints() = 0;
};

// The strategies make_strategy accepts with `options` (hooks, local SGD and DiLoCo need ddp;
// master weights are refused under ZeRO): what --strategy auto chooses among.
std::vector<std::string> strategies_allowed(const StrategyOptions& options);

// Collective over `group`: wraps `model` (whose weights must be the same on every rank, or
// rank 0's are taken). Throws cohort::InvalidArgument for a name not in kStrategyNames.
std::unique_ptr<Strategy> make_strategy(const std::string& name,
                                        std::shared_ptr<torch::nn::Module> model,
                                        std::shared_ptr<cohort::Group> group,
                                        const StrategyOptions& options);

// One line per rank, printed by rank 0: each rank's model state (strategy.model_state_bytes),
// the most CPU tensor memory its training steps held at once above what training started with
// (step_memory_peak_bytes(), memory.h: activations, gradients, temporaries) and peak RSS.
// Collective over `group`.
void print_memory_of_ranks(const Strategy& strategy, const torch::optim::Optimizer& optimizer,
                           cohort::Group& group);

}  // namespace cohort_examples
