#include "cohort/torch/strategy/strategy.h"

#include "cohort/core/error.h"
#include "cohort/torch/compress/compression_hook.h"
#include "cohort/torch/nn/sync_batch_norm.h"
#include "strategy/strategies.h"

namespace cohort {
namespace {

std::shared_ptr<torch::nn::Module> with_sync_batchnorm(std::shared_ptr<torch::nn::Module> model,
                                                       const std::shared_ptr<Group>& group,
                                                       bool convert) {
  if (!convert) return model;
  model = nn::convert_sync_batchnorm(std::move(model), group);
  for (const auto& module : model->modules()) {
    if (std::dynamic_pointer_cast<nn::SyncBatchNormImpl>(module)) return model;
  }
  throw InvalidArgument(
      "SyncBatchNorm (--sync-bn, StrategyOptions::sync_batchnorm): the model has no BatchNorm "
      "to synchronize");
}

[[noreturn]] void refuse(const std::string& what) {
  throw InvalidArgument(what);
}

}  // namespace

Strategy::Strategy(StrategyKind kind, std::shared_ptr<torch::nn::Module> model,
                   std::shared_ptr<Group> group, const StrategyOptions& options)
    : kind_(kind),
      model_(with_sync_batchnorm(std::move(model), group, options.sync_batchnorm)),
      group_(std::move(group)),
      precision_(options.precision),
      checkpoints_(group_, options.background_checkpoints) {
  if (options.activation_checkpointing)
    regions_ = checkpoint_modules(*model_, *options.activation_checkpointing);
}

Strategy::~Strategy() = default;

void Strategy::zero_grad(torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
}

void Strategy::backward(const torch::Tensor& loss) {
  precision_.scaler().scale(loss).backward();
}

bool Strategy::step(torch::optim::Optimizer& optimizer) {
  checkpoints_.before_update();
  const bool stepped = step_optimizer(optimizer, precision_.scaler());
  precision_.scaler().update();
  return stepped;
}

TrainingState Strategy::with_scaler(const TrainingState& state) {
  TrainingState out = state;
  if (precision_.scales_loss()) out.grad_scaler = &precision_.scaler();
  return out;
}

void check_strategy_options(StrategyKind kind, const StrategyOptions& options) {
  const bool master = options.precision.master_weights;
  const std::string name = strategy_name(kind);
  if (kind != StrategyKind::kDdp && (options.comm_hook || options.local_sgd || options.diloco)) {
    refuse(
        "comm hooks, local SGD and DiLoCo (StrategyOptions::comm_hook, local_sgd, diloco; "
        "the examples' --comm-hook, --local-sgd and --diloco) work with --strategy ddp only "
        "(" +
        name + " shards the gradients; docs/compression.md)");
  }
  if (is_zero(kind) && master) {
    refuse(
        "master weights (--master-weights) are not available under zero1 and zero2 (their "
        "shards would be the 16-bit parameters themselves): use --strategy ddp, or "
        "full_shard, shard_grad_op or hybrid_shard, whose float32 shards are the master "
        "weights");
  }
  if (options.local_sgd) {
    if (options.comm_hook) {
      refuse(
          "local SGD (--local-sgd) and a comm hook (--comm-hook) do not combine: local SGD "
          "sends no gradients after its warm-up; give one of them");
    }
    if (master) {
      refuse(
          "local SGD (--local-sgd) averages the model's own parameters, and master weights "
          "(--master-weights) keep the optimizer's in float32 masters: give one of them");
    }
  }
  if (options.diloco && (options.local_sgd || master)) {
    refuse(
        "DiLoCo (--diloco) replaces the gradient allreduce and updates the model's own "
        "parameters: it does not combine with local SGD (--local-sgd) or master weights "
        "(--master-weights)");
  }
  if (master && std::dynamic_pointer_cast<CompressionHook>(options.comm_hook)) {
    refuse("the comm hook " + options.comm_hook->name() +
           " compresses float32 gradients, and master weights (--master-weights) make them "
           "16-bit: give one of them (bf16 without master weights keeps float32 gradients)");
  }
}

std::vector<StrategyKind> strategies_allowed(const StrategyOptions& options) {
  std::vector<StrategyKind> allowed;
  for (const StrategyKind kind : all_strategy_kinds()) {
    try {
      check_strategy_options(kind, options);
      allowed.push_back(kind);
    } catch (const InvalidArgument&) {
    }
  }
  return allowed;
}

std::unique_ptr<Strategy> make_strategy(StrategyKind kind, std::shared_ptr<torch::nn::Module> model,
                                        std::shared_ptr<Group> group,
                                        const StrategyOptions& options) {
  check_strategy_options(kind, options);
  if (kind == StrategyKind::kDdp) {
    return strategy_detail::make_ddp_strategy(std::move(model), std::move(group), options);
  }
  return strategy_detail::make_sharded_strategy(kind, std::move(model), std::move(group), options);
}

namespace strategy_detail {

DdpOptions ddp_options(const StrategyOptions& options) {
  DdpOptions o;
  o.bucket_cap_mb = options.bucket_cap_mb;
  o.first_bucket_cap_mb = options.first_bucket_cap_mb;
  o.timeline = options.timeline;
  o.comm_hook = options.comm_hook;
  return o;
}

StepCommunication communication_of(const IterationStats& stats) {
  StepCommunication out;
  out.exposed_ms = stats.exposed_comm_ms;
  for (const BucketStats& b : stats.buckets) {
    out.bucket_latency_ms.push_back(b.latency_ms);
    out.bucket_comm_ms.push_back(b.comm_ms);
    out.reduced_bytes += static_cast<int64_t>(b.reduced_bytes);
  }
  return out;
}

}  // namespace strategy_detail
}  // namespace cohort
