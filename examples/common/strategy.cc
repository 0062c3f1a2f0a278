#include "strategy.h"

#include <cstdio>

#include "checkpointing.h"
#include "cohort/core/error.h"
#include "cohort/torch/amp/master_weights.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/compress/compression_hook.h"
#include "cohort/torch/ddp/ddp.h"
#include "cohort/torch/local_sgd/local_sgd.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"

namespace cohort_examples {

namespace {

StepCommunication communication_of(const cohort::IterationStats& stats) {
  StepCommunication out;
  out.exposed_ms = stats.exposed_comm_ms;
  for (const cohort::BucketStats& b : stats.buckets) {
    out.bucket_latency_ms.push_back(b.latency_ms);
    out.bucket_comm_ms.push_back(b.comm_ms);
    out.reduced_bytes += static_cast<int64_t>(b.reduced_bytes);
  }
  return out;
}

cohort::DdpOptions ddp_options(const StrategyOptions& options) {
  cohort::DdpOptions o;
  o.bucket_cap_mb = options.bucket_cap_mb;
  o.first_bucket_cap_mb = options.first_bucket_cap_mb;
  o.timeline = options.timeline;
  o.comm_hook = options.comm_hook;
  if (options.master_weights && std::dynamic_pointer_cast<cohort::CompressionHook>(o.comm_hook)) {
    throw cohort::InvalidArgument(
        "--comm-hook " + o.comm_hook->name() +
        " compresses float32 gradients, and --master-weights makes them 16-bit: give one of "
        "them (--precision bf16 without --master-weights keeps float32 gradients)");
  }
  if (options.local_sgd_period > 0) {
    if (options.comm_hook) {
      throw cohort::InvalidArgument(
          "--local-sgd and --comm-hook do not combine: local SGD sends no gradients after "
          "its warm-up; give one of them");
    }
    if (options.master_weights) {
      throw cohort::InvalidArgument(
          "--local-sgd averages the model's own parameters, and --master-weights keeps the "
          "optimizer's in float32 masters: give one of them");
    }
    // Post-local SGD: DDP's averaging allreduce for the warm-up steps, then none.
    o.comm_hook = cohort::post_local_sgd_hook(options.local_sgd_warmup);
  }
  if (options.diloco.enabled()) {
    if (options.local_sgd_period > 0 || options.master_weights) {
      throw cohort::InvalidArgument(
          "--diloco replaces the gradient allreduce and updates the model's own parameters: "
          "it does not combine with --local-sgd or --master-weights");
    }
    // No gradient communication at all; hierarchical: the plain average inside the node (DDP's
    // group is the node's, ddp_group_of).
    o.comm_hook = options.diloco.hierarchical ? nullptr : cohort::post_local_sgd_hook(0);
  }
  return o;
}

// The ranks DDP averages the gradients over: all, or under hierarchical DiLoCo the node's.
std::shared_ptr<cohort::Group> ddp_group_of(const std::shared_ptr<cohort::Group>& group,
                                            const StrategyOptions& options) {
  if (!options.diloco.enabled() || !options.diloco.hierarchical) return group;
  return group->split(group->node_rank(), group->rank());
}

std::unique_ptr<cohort::DiLoCo> diloco_of(const std::shared_ptr<torch::nn::Module>& model,
                                          const std::shared_ptr<cohort::Group>& group,
                                          const StrategyOptions& options) {
  if (!options.diloco.enabled()) return nullptr;
  cohort::DiLoCoOptions diloco = options.diloco.options();
  diloco.hook = options.comm_hook;  // --comm-hook: how the rounds travel (compressed, say)
  return std::make_unique<cohort::DiLoCo>(group, *model, diloco);
}

std::unique_ptr<cohort::PeriodicModelAverager> local_sgd_averager(
    const std::shared_ptr<cohort::Group>& group, const StrategyOptions& options) {
  if (options.local_sgd_period <= 0) return nullptr;
  cohort::LocalSgdOptions o;
  o.period = options.local_sgd_period;
  o.warmup_steps = options.local_sgd_warmup;
  return std::make_unique<cohort::PeriodicModelAverager>(group, o);
}

int64_t optimizer_bytes(const torch::optim::Optimizer& optimizer) {
  return static_cast<int64_t>(cohort::optimizer_state_bytes(optimizer));
}

std::unique_ptr<cohort::amp::MasterWeights> master_weights_of(
    const std::shared_ptr<torch::nn::Module>& model, const StrategyOptions& options) {
  if (!options.master_weights) return nullptr;
  return std::make_unique<cohort::amp::MasterWeights>(model, *options.master_weights);
}

// Every rank holds the whole model, its gradients (in DDP's buckets, which the .grad tensors
// are views of) and the optimizer state; backward averages the gradients over the ranks. Under
// --master-weights the model and its buckets are 16-bit and the optimizer updates float32
// masters (cohort::amp::MasterWeights), which the checkpoints hold.
class DdpStrategy : public Strategy {
 public:
  DdpStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<cohort::Group> group,
              const StrategyOptions& options)
      : model_(std::move(model)),
        group_(std::move(group)),
        master_(master_weights_of(model_, options)),  // first: DDP then buckets 16-bit tensors
        ddp_(model_, ddp_group_of(group_, options), ddp_options(options)),
        averager_(local_sgd_averager(group_, options)),
        diloco_(diloco_of(model_, group_, options)),
        checkpoints_(group_, options.background_checkpoints) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return master_ ? master_->named_parameters() : model_->named_parameters();
  }

  void zero_grad(torch::optim::Optimizer& optimizer) override {
    if (master_) {
      master_->zero_grad();
    } else {
      optimizer.zero_grad();
    }
  }

  // The gradients are already the same on every rank (so is what the scaler finds in them),
  // so torch's own clipping is the whole model's.
  double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm,
                        cohort::amp::GradScaler& scaler) override {
    if (master_) master_->copy_gradients_to_masters();
    scaler.unscale_(optimizer);
    return torch::nn::utils::clip_grad_norm_(master_ ? master_->parameters() : model_->parameters(),
                                             max_norm);
  }

  // Under local SGD every rank calls the averager after every step, stepped or not (a step the
  // scaler skipped on one rank only), so that all ranks average at the same calls.
  bool step(torch::optim::Optimizer& optimizer, cohort::amp::GradScaler& scaler) override {
    checkpoints_.before_update();
    const bool stepped = master_ ? master_->step(optimizer, &scaler) : scaler.step(optimizer);
    averaged_ = averager_ && averager_->average(*model_, &optimizer);
    if (diloco_) {
      const int64_t sent_before = diloco_->sent_bytes();
      diloco_->step();
      diloco_sent_ = diloco_->sent_bytes() - sent_before;
    }
    return stepped;
  }

  bool rebucket(double bucket_cap_mb) override {
    ddp_.rebucket(bucket_cap_mb);
    return true;
  }

  StepCommunication last_step_communication() const override {
    StepCommunication communication = communication_of(ddp_.last_iteration_stats());
    if (averaged_) communication.reduced_bytes += tensor_bytes(model_->parameters());
    communication.reduced_bytes += diloco_sent_;
    return communication;
  }

  // An update: the averaging and DiLoCo's synchronization change the parameters in place.
  void end_epoch(torch::optim::Optimizer& optimizer) override {
    checkpoints_.before_update();
    if (averager_) averager_->average_now(*model_, &optimizer);
    if (diloco_) diloco_->synchronize_all();  // every rank saves and evaluates the outer model
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    const std::vector<torch::Tensor> parameters = model_->parameters();
    ModelStateBytes bytes;
    bytes.parameters = tensor_bytes(parameters);  // 16-bit under --master-weights, + the masters:
    if (master_) bytes.parameters += tensor_bytes(master_->parameters());
    bytes.gradients = gradient_bytes(parameters);
    bytes.optimizer_state = optimizer_bytes(optimizer);
    return bytes;
  }

  // Under --master-weights the checkpoint holds the float32 masters under the model's names
  // (MasterWeights::checkpoint_module), not the model's 16-bit rounding of them.
  // Under --diloco the checkpoint keeps DiLoCo's outer state too (a part named "diloco").
  bool resume(const std::string& path, const cohort::LoadOptions& options,
              cohort::TrainingState& state) override {
    cohort::TrainingState loaded = with_parts(state);
    if (master_) loaded.module = master_->checkpoint_module().get();
    const bool resumed = resume_from_checkpoint(path, options, *group_, loaded);
    state.step = loaded.step;
    state.epoch = loaded.epoch;
    if (resumed && master_) master_->loaded_into_masters();
    return resumed;
  }

  void save(const std::string& path, const cohort::TrainingState& state,
            cohort::DistributedSampler& sampler, bool epoch_finished) override {
    cohort::TrainingState saved = with_parts(state);
    if (master_) saved.module = master_->checkpoint_module().get();
    save_epoch_checkpoint(path, *group_, saved, sampler, epoch_finished,
                          [&](const cohort::TrainingState& s) { checkpoints_.save(path, s); });
  }

  void finish_checkpoints() override { checkpoints_.finish(); }

 private:
  cohort::TrainingState with_parts(const cohort::TrainingState& state) const {
    cohort::TrainingState out = state;
    if (diloco_) out.parts.emplace_back("diloco", diloco_.get());
    return out;
  }

  std::shared_ptr<torch::nn::Module> model_;
  std::shared_ptr<cohort::Group> group_;
  std::unique_ptr<cohort::amp::MasterWeights> master_;
  cohort::DistributedDataParallel ddp_;
  std::unique_ptr<cohort::PeriodicModelAverager> averager_;  // --local-sgd
  bool averaged_ = false;                                    // in the last step
  std::unique_ptr<cohort::DiLoCo> diloco_;                   // --diloco
  int64_t diloco_sent_ = 0;                                  // in the last step
  CheckpointWriter checkpoints_;
};

// What this rank holds, from each sharded wrapper's own report.
ModelStateBytes bytes_of(const cohort::MemoryReport& memory) {
  ModelStateBytes bytes;
  bytes.parameters = static_cast<int64_t>(memory.parameters);
  bytes.gradients = static_cast<int64_t>(memory.gradients);
  bytes.peak_gradients = static_cast<int64_t>(memory.peak_gradients);
  bytes.optimizer_state = static_cast<int64_t>(memory.optimizer_state);
  return bytes;
}

ModelStateBytes bytes_of(const cohort::FsdpMemoryReport& memory) {
  ModelStateBytes bytes;
  bytes.parameters = static_cast<int64_t>(memory.parameter_shards);
  bytes.peak_gathered = static_cast<int64_t>(memory.peak_gathered);
  bytes.gradients = static_cast<int64_t>(memory.gradients);
  bytes.peak_gradients = static_cast<int64_t>(memory.peak_gradients);
  bytes.optimizer_state = static_cast<int64_t>(memory.optimizer_state);
  return bytes;
}

// ZeroDataParallel (stages 1 and 2) or FullyShardedDataParallel: the optimizer steps this
// rank's 1-D shards of the parameters, clipping reduces the shards' norms, and checkpoints are
// sharded: a directory at the path, one file per rank and a manifest, which loads at any
// number of ranks and under any strategy.
template <typename Wrapper>
class ShardedStrategy : public Strategy {
 public:
  template <typename Options>
  ShardedStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<cohort::Group> group,
                  const Options& options, bool background_checkpoints)
      : group_(group),
        wrapper_(std::move(model), group, options),
        checkpoints_(std::move(group), background_checkpoints) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return wrapper_.named_parameters();
  }

  cohort::optim::NormReduction norm_reduction() override {
    return cohort::optim::shard_norm_reduction(wrapper_);
  }

  // The norm of the whole gradient, from every rank's shards (one small allreduce, which also
  // tells every rank whether some rank's shards overflowed).
  double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm,
                        cohort::amp::GradScaler& scaler) override {
    return scaler.clip_grad_norm(wrapper_, optimizer, max_norm);
  }

  bool step(torch::optim::Optimizer& optimizer, cohort::amp::GradScaler& scaler) override {
    checkpoints_.before_update();
    return scaler.step(wrapper_, optimizer);
  }

  StepCommunication last_step_communication() const override {
    return communication_of(wrapper_.last_iteration_stats());
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    return bytes_of(wrapper_.memory(&optimizer));
  }

  std::shared_ptr<void> whole_parameters() override;

  bool resume(const std::string& path, const cohort::LoadOptions& options,
              cohort::TrainingState& state) override {
    return resume_from_checkpoint(path, options, *group_, state,
                                  [&](cohort::TrainingState& s, const cohort::LoadOptions& load) {
                                    return cohort::load_sharded_checkpoint(path, wrapper_, s, load);
                                  });
  }

  void save(const std::string& path, const cohort::TrainingState& state,
            cohort::DistributedSampler& sampler, bool epoch_finished) override {
    save_epoch_checkpoint(
        path, *group_, state, sampler, epoch_finished,
        [&](const cohort::TrainingState& s) { checkpoints_.save_sharded(path, wrapper_, s); });
  }

  void finish_checkpoints() override { checkpoints_.finish(); }

 private:
  std::shared_ptr<cohort::Group> group_;
  Wrapper wrapper_;
  CheckpointWriter checkpoints_;
};

template <>
std::shared_ptr<void> ShardedStrategy<cohort::ZeroDataParallel>::whole_parameters() {
  return nullptr;  // ZeRO keeps every parameter whole
}

template <>
std::shared_ptr<void> ShardedStrategy<cohort::FullyShardedDataParallel>::whole_parameters() {
  return std::make_shared<cohort::FullyShardedDataParallel::FullParameters>(
      wrapper_.full_parameters());
}

cohort::ZeroOptions zero_options(const StrategyOptions& options, int stage) {
  if (options.master_weights) {
    throw cohort::InvalidArgument(
        "--master-weights is not available under zero1 and zero2 (their shards would be the "
        "16-bit parameters themselves): use --strategy ddp, or full_shard, shard_grad_op or "
        "hybrid_shard, whose float32 shards are the master weights");
  }
  cohort::ZeroOptions o;
  o.stage = stage;
  o.ddp = ddp_options(options);
  return o;
}

cohort::FsdpOptions fsdp_options(const StrategyOptions& options, cohort::ShardingStrategy how) {
  cohort::FsdpOptions o;
  o.strategy = how;
  o.auto_wrap.min_parameters = options.fsdp_min_unit_parameters;
  o.forward_prefetch = o.backward_prefetch = options.fsdp_prefetch;
  o.mixed_precision.param_dtype = options.master_weights;  // float32 shards, 16-bit units
  o.timeline = options.timeline;
  return o;
}

}  // namespace

std::string strategy_help() {
  return "data parallelism: ddp (DistributedDataParallel), zero1 or zero2 (ZeroDataParallel "
         "stage 1 or 2), full_shard, shard_grad_op or hybrid_shard (FullyShardedDataParallel "
         "with that strategy), or auto (the planner's choice: docs/planner.md)";
}

std::vector<std::string> strategy_choices() {
  std::vector<std::string> choices = kStrategyNames;
  choices.push_back("auto");
  return choices;
}

std::vector<std::string> strategies_allowed(const StrategyOptions& options) {
  if (options.comm_hook || options.local_sgd_period > 0 || options.diloco.enabled()) return {"ddp"};
  std::vector<std::string> allowed;
  for (const auto& name : kStrategyNames) {
    const bool zero = name == "zero1" || name == "zero2";
    if (!(zero && options.master_weights)) allowed.push_back(name);
  }
  return allowed;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name,
                                        std::shared_ptr<torch::nn::Module> model,
                                        std::shared_ptr<cohort::Group> group,
                                        const StrategyOptions& options) {
  using Zero = ShardedStrategy<cohort::ZeroDataParallel>;
  using Fsdp = ShardedStrategy<cohort::FullyShardedDataParallel>;
  using How = cohort::ShardingStrategy;
  const bool background = options.background_checkpoints;
  if (options.diloco.hierarchical && !options.diloco.enabled()) {
    throw cohort::InvalidArgument("--diloco-hierarchical needs --diloco H (the inner steps)");
  }
  if (name == "ddp") return std::make_unique<DdpStrategy>(model, group, options);
  if (options.comm_hook || options.local_sgd_period > 0 || options.diloco.enabled()) {
    throw cohort::InvalidArgument(
        "--comm-hook, --local-sgd and --diloco work with --strategy ddp "
        "only (" +
        name + " shards the gradients; docs/compression.md)");
  }
  if (name == "zero1")
    return std::make_unique<Zero>(model, group, zero_options(options, 1), background);
  if (name == "zero2")
    return std::make_unique<Zero>(model, group, zero_options(options, 2), background);
  if (name == "full_shard") {
    return std::make_unique<Fsdp>(model, group, fsdp_options(options, How::kFullShard), background);
  }
  if (name == "shard_grad_op") {
    return std::make_unique<Fsdp>(model, group, fsdp_options(options, How::kShardGradOp),
                                  background);
  }
  if (name == "hybrid_shard") {
    return std::make_unique<Fsdp>(model, group, fsdp_options(options, How::kHybridShard),
                                  background);
  }
  throw cohort::InvalidArgument("--strategy " + name +
                                " is unknown: give one of ddp, zero1, zero2, full_shard, "
                                "shard_grad_op, hybrid_shard");
}

void print_memory_of_ranks(const Strategy& strategy, const torch::optim::Optimizer& optimizer,
                           cohort::Group& group) {
  // The ranks' figures are gathered with one allreduce: each rank fills its own slots of a
  // zeroed vector.
  constexpr size_t kFigures = 7;
  const ModelStateBytes state = strategy.model_state_bytes(optimizer);
  std::vector<double> figures(kFigures * static_cast<size_t>(group.size()), 0.0);
  double* mine = figures.data() + kFigures * static_cast<size_t>(group.rank());
  mine[0] = double(state.parameters);
  mine[1] = double(state.peak_gathered);
  mine[2] = double(state.gradients);
  mine[3] = double(state.optimizer_state);
  mine[4] = double(peak_rss_bytes());
  mine[5] = double(state.peak_gradients);
  mine[6] = double(step_memory_peak_bytes());
  group.allreduce(cohort::make_buffer(figures));
  if (group.rank() != 0) return;
  const auto mib = [](double bytes) { return bytes / (1024.0 * 1024.0); };
  for (int r = 0; r < group.size(); ++r) {
    const double* f = figures.data() + kFigures * static_cast<size_t>(r);
    std::printf("  memory of rank %d: model state %.2f MiB (parameters %.2f", r,
                mib(f[0] + f[1] + f[2] + f[3]), mib(f[0]));
    if (f[1] > 0) std::printf(" + units gathered at once %.2f", mib(f[1]));
    std::printf(" + gradients %.2f", mib(f[2]));
    if (f[5] > f[2]) std::printf(" (peak %.2f in backward)", mib(f[5]));
    std::printf(" + optimizer state %.2f), ", mib(f[3]));
    if (f[6] > 0) std::printf("tensors of the steps %.1f MiB at peak, ", mib(f[6]));
    std::printf("peak RSS %.1f MiB\n", mib(f[4]));
  }
  std::fflush(stdout);
}

}  // namespace cohort_examples
