// How the model is made data parallel (--strategy): the one place that knows. The trainer
// builds its optimizer over what the strategy gives it, calls it after backward (clipping) and
// for the optimizer step, asks it what the last step communicated and what the model state
// costs in memory, and lets it save and load checkpoints. Wiring a sharded strategy (FSDP) is
// a new Strategy in strategy.cc and nothing else.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"
#include "cohort/torch/checkpoint.h"
#include "cohort/torch/distributed_sampler.h"
#include "gpt.h"
#include "memory.h"

namespace char_lm {

// Every name --strategy takes; "ddp", "zero1" and "zero2" are available, the FSDP ones not yet
// (docs/char_lm.md).
inline const std::vector<std::string> kStrategyNames = {
    "ddp", "zero1", "zero2", "full_shard", "shard_grad_op", "hybrid_shard"};

struct StrategyOptions {
  double bucket_cap_mb = 25.0;                 // gradient bucket size
  std::shared_ptr<cohort::Timeline> timeline;  // where communication is recorded; may be null
};

// What the last step's gradient synchronization cost (DDP's IterationStats, docs/ddp.md).
struct StepCommunication {
  double exposed_ms = 0;                  // the time backward waited for it
  std::vector<double> bucket_latency_ms;  // per bucket, in reduction order
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  // The tensors to build the optimizer over, under the names of the model's parameters they
  // stand for (DDP: the parameters themselves; ZeRO: this rank's 1-D shards of them).
  virtual torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const = 0;
  // After backward: scales the gradients so that the 2-norm of the whole model's gradient is
  // at most `max_norm` (the same on every rank); returns the norm before clipping.
  virtual double clip_gradients(double max_norm) = 0;
  // The optimizer's step, and whatever must follow it before the next forward.
  virtual void step(torch::optim::Optimizer& optimizer) = 0;
  virtual StepCommunication last_step_communication() const = 0;
  // This rank's model state.
  virtual ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const = 0;
  // The checkpoint idiom of the examples (examples/common/checkpointing.h). Collective.
  virtual bool resume(const std::string& path, bool any_job, cohort::TrainingState& state) = 0;
  virtual void save(const std::string& path, const cohort::TrainingState& state,
                    cohort::DistributedSampler& sampler, bool epoch_finished) = 0;
};

// Collective over `group`. Throws cohort::InvalidArgument for a name not in kStrategyNames and
// for a strategy that is not available yet, saying which one is.
std::unique_ptr<Strategy> make_strategy(const std::string& name, Gpt model,
                                        std::shared_ptr<cohort::Group> group,
                                        const StrategyOptions& options);

}  // namespace char_lm
