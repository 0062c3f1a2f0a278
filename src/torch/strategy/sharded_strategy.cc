// StrategyKind kZero1, kZero2 (ZeroDataParallel) and the FSDP kinds (FullyShardedDataParallel):
// the optimizer steps this rank's 1-D shards of the parameters, clipping and the loss scaler
// reduce over the shards, and checkpoints are sharded: a directory with one file per rank and
// a manifest, which loads at any number of ranks and under any sharded strategy.
#include <type_traits>

#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/shard/zero.h"
#include "strategy/strategies.h"

namespace cohort::strategy_detail {

ZeroOptions zero_options(StrategyKind kind, const StrategyOptions& options) {
  ZeroOptions o;
  o.stage = kind == StrategyKind::kZero1 ? 1 : 2;
  o.ddp = ddp_options(options);
  return o;
}

// Under master weights the units are 16-bit and their float32 shards the masters.
FsdpOptions fsdp_options(StrategyKind kind, const StrategyOptions& options,
                         const Precision& precision) {
  FsdpOptions o;
  o.strategy = fsdp_sharding_of(kind);
  o.auto_wrap.min_parameters = options.fsdp_min_unit_parameters;
  o.forward_prefetch = o.backward_prefetch = options.fsdp_prefetch;
  o.mixed_precision.param_dtype = precision.master_weights();
  o.timeline = options.timeline;
  return o;
}

namespace {

ModelStateBytes bytes_of(const MemoryReport& memory) {
  ModelStateBytes bytes;
  bytes.parameters = static_cast<int64_t>(memory.parameters);
  bytes.gradients = static_cast<int64_t>(memory.gradients);
  bytes.peak_gradients = static_cast<int64_t>(memory.peak_gradients);
  bytes.optimizer_state = static_cast<int64_t>(memory.optimizer_state);
  return bytes;
}

ModelStateBytes bytes_of(const FsdpMemoryReport& memory) {
  ModelStateBytes bytes;
  bytes.parameters = static_cast<int64_t>(memory.parameter_shards);
  bytes.peak_gathered = static_cast<int64_t>(memory.peak_gathered);
  bytes.gradients = static_cast<int64_t>(memory.gradients);
  bytes.peak_gradients = static_cast<int64_t>(memory.peak_gradients);
  bytes.optimizer_state = static_cast<int64_t>(memory.optimizer_state);
  return bytes;
}

template <typename Wrapper>
class ShardedStrategy : public Strategy {
 public:
  ShardedStrategy(StrategyKind kind, std::shared_ptr<torch::nn::Module> model,
                  std::shared_ptr<Group> group, const StrategyOptions& options)
      : Strategy(kind, std::move(model), std::move(group), options),
        wrapper_(this->model(), group_ptr(), wrapper_options(kind, options)) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return wrapper_.named_parameters();
  }

  optim::NormReduction norm_reduction() override { return optim::shard_norm_reduction(wrapper_); }

  // The norm of the whole gradient, from every rank's shards (one small allreduce, which also
  // tells every rank whether some rank's shards overflowed).
  double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm) override {
    return precision().scaler().clip_grad_norm(wrapper_, optimizer, max_norm);
  }

  StepCommunication last_step_communication() const override {
    return communication_of(wrapper_.last_iteration_stats());
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    return bytes_of(wrapper_.memory(&optimizer));
  }

  std::shared_ptr<void> whole_parameters() override;

  bool load(const std::string& path, TrainingState& state, const LoadOptions& options) override {
    TrainingState loaded = with_scaler(state);
    const bool resumed = load_sharded_checkpoint(path, wrapper_, loaded, options);
    state.step = loaded.step;
    state.epoch = loaded.epoch;
    return resumed;
  }

  void save(const std::string& path, const TrainingState& state) override {
    checkpoints().save_sharded(path, wrapper_, with_scaler(state));
  }

 protected:
  bool step_optimizer(torch::optim::Optimizer& optimizer, amp::GradScaler& scaler) override {
    return scaler.step(wrapper_, optimizer);
  }

 private:
  auto wrapper_options(StrategyKind kind, const StrategyOptions& options) {
    if constexpr (std::is_same_v<Wrapper, ZeroDataParallel>) {
      return zero_options(kind, options);
    } else {
      return fsdp_options(kind, options, precision());
    }
  }

  Wrapper wrapper_;
};

template <>
std::shared_ptr<void> ShardedStrategy<ZeroDataParallel>::whole_parameters() {
  return nullptr;  // ZeRO keeps every parameter whole
}

template <>
std::shared_ptr<void> ShardedStrategy<FullyShardedDataParallel>::whole_parameters() {
  return std::make_shared<FullyShardedDataParallel::FullParameters>(wrapper_.full_parameters());
}

}  // namespace

std::unique_ptr<Strategy> make_sharded_strategy(StrategyKind kind,
                                                std::shared_ptr<torch::nn::Module> model,
                                                std::shared_ptr<Group> group,
                                                const StrategyOptions& options) {
  if (is_zero(kind)) {
    return std::make_unique<ShardedStrategy<ZeroDataParallel>>(kind, std::move(model),
                                                               std::move(group), options);
  }
  return std::make_unique<ShardedStrategy<FullyShardedDataParallel>>(kind, std::move(model),
                                                                     std::move(group), options);
}

}  // namespace cohort::strategy_detail
