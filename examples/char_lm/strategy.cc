#include "strategy.h"

#include <algorithm>

#include "checkpointing.h"
#include "cohort/core/error.h"
#include "cohort/torch/ddp.h"
#include "cohort/torch/sharded_checkpoint.h"
#include "cohort/torch/zero.h"

namespace char_lm {

namespace {

StepCommunication communication_of(const cohort::IterationStats& stats) {
  StepCommunication out;
  out.exposed_ms = stats.exposed_comm_ms;
  for (const cohort::BucketStats& b : stats.buckets) out.bucket_latency_ms.push_back(b.latency_ms);
  return out;
}

cohort::DdpOptions ddp_options(const StrategyOptions& options) {
  cohort::DdpOptions o;
  o.bucket_cap_mb = options.bucket_cap_mb;
  o.timeline = options.timeline;
  return o;
}

// Every rank holds the whole model, its gradients (in DDP's buckets, which the .grad tensors
// are views of) and the optimizer state; backward averages the gradients over the ranks.
class DdpStrategy : public Strategy {
 public:
  DdpStrategy(Gpt model, std::shared_ptr<cohort::Group> group, const StrategyOptions& options)
      : model_(std::move(model)),
        group_(std::move(group)),
        ddp_(model_, group_, ddp_options(options)) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return model_->named_parameters();
  }

  // The gradients are already the same on every rank, so torch's own clipping is the
  // whole model's.
  double clip_gradients(double max_norm) override {
    return torch::nn::utils::clip_grad_norm_(model_->parameters(), max_norm);
  }

  void step(torch::optim::Optimizer& optimizer) override { optimizer.step(); }

  StepCommunication last_step_communication() const override {
    return communication_of(ddp_.last_iteration_stats());
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    const std::vector<torch::Tensor> parameters = model_->parameters();
    return {tensor_bytes(parameters), gradient_bytes(parameters), adamw_state_bytes(optimizer)};
  }

  bool resume(const std::string& path, bool any_job, cohort::TrainingState& state) override {
    return cohort_examples::resume_from_checkpoint(path, any_job, *group_, state);
  }

  void save(const std::string& path, const cohort::TrainingState& state,
            cohort::DistributedSampler& sampler, bool epoch_finished) override {
    cohort_examples::save_epoch_checkpoint(path, *group_, state, sampler, epoch_finished);
  }

 private:
  Gpt model_;
  std::shared_ptr<cohort::Group> group_;
  cohort::DistributedDataParallel ddp_;
};

// ZeRO stage 1 (the optimizer state divided among the ranks) or 2 (the gradients too): the
// optimizer steps this rank's 1-D shards of the parameters, and the step all-gathers the
// updated parameters (docs/sharding.md). Checkpoints are sharded: a directory at the path, one
// file per rank and a manifest (docs/checkpoints.md, "Sharded checkpoints"), which load at any
// number of ranks and into either stage.
class ZeroStrategy : public Strategy {
 public:
  ZeroStrategy(Gpt model, std::shared_ptr<cohort::Group> group, const StrategyOptions& options,
               int stage)
      : group_(group), zero_(std::move(model), std::move(group), zero_options(options, stage)) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return zero_.named_parameters();
  }

  // The norm of the whole gradient, from every rank's shards (one small allreduce).
  double clip_gradients(double max_norm) override {
    return cohort::clip_grad_norm(zero_, max_norm);
  }

  void step(torch::optim::Optimizer& optimizer) override { zero_.step(optimizer); }

  StepCommunication last_step_communication() const override {
    return communication_of(zero_.last_iteration_stats());
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    const cohort::MemoryReport memory = zero_.memory(&optimizer);
    return {static_cast<int64_t>(memory.parameters), static_cast<int64_t>(memory.gradients),
            static_cast<int64_t>(memory.optimizer_state)};
  }

  bool resume(const std::string& path, bool any_job, cohort::TrainingState& state) override {
    return cohort_examples::resume_from_checkpoint(
        path, any_job, *group_, state,
        [&](cohort::TrainingState& s, const cohort::LoadOptions& load) {
          return cohort::load_sharded_checkpoint(path, zero_, s, load);
        });
  }

  void save(const std::string& path, const cohort::TrainingState& state,
            cohort::DistributedSampler& sampler, bool epoch_finished) override {
    cohort_examples::save_epoch_checkpoint(
        path, *group_, state, sampler, epoch_finished,
        [&](const cohort::TrainingState& s) { cohort::save_sharded_checkpoint(path, zero_, s); });
  }

 private:
  static cohort::ZeroOptions zero_options(const StrategyOptions& options, int stage) {
    cohort::ZeroOptions o;
    o.stage = stage;
    o.ddp = ddp_options(options);
    return o;
  }

  std::shared_ptr<cohort::Group> group_;
  cohort::ZeroDataParallel zero_;
};

}  // namespace

std::unique_ptr<Strategy> make_strategy(const std::string& name, Gpt model,
                                        std::shared_ptr<cohort::Group> group,
                                        const StrategyOptions& options) {
  if (name == "ddp")
    return std::make_unique<DdpStrategy>(std::move(model), std::move(group), options);
  if (name == "zero1" || name == "zero2") {
    return std::make_unique<ZeroStrategy>(std::move(model), std::move(group), options,
                                          name == "zero1" ? 1 : 2);
  }
  if (std::find(kStrategyNames.begin(), kStrategyNames.end(), name) != kStrategyNames.end()) {
    throw cohort::InvalidArgument("--strategy " + name +
                                  " is not available yet: cohort's fully sharded data "
                                  "parallelism (FSDP) is still being built; use --strategy ddp, "
                                  "zero1 or zero2");
  }
  throw cohort::InvalidArgument("--strategy " + name +
                                " is unknown: give one of ddp, zero1, "
                                "zero2, full_shard, shard_grad_op, hybrid_shard");
}

}  // namespace char_lm
