// StrategyKind::kDdp: every rank holds the whole model, its gradients (in DDP's buckets, which
// the .grad tensors are views of) and the optimizer state; backward averages the gradients.
// Under master weights the model and its buckets are 16-bit and the optimizer updates float32
// masters (amp::MasterWeights), which the checkpoints hold. Local SGD and DiLoCo replace the
// per-step gradient average by rounds after the optimizer's step.
#include "cohort/torch/amp/master_weights.h"
#include "strategy/strategies.h"

namespace cohort::strategy_detail {
namespace {

int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return bytes;
}

int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> gradients;
  for (const torch::Tensor& p : parameters) gradients.push_back(p.grad());
  return tensor_bytes(gradients);
}

// Local SGD: DDP's averaging allreduce for the warm-up steps, then none. DiLoCo: no gradient
// communication at all, or under hierarchical DiLoCo the plain average inside the node.
DdpOptions ddp_options_of(const StrategyOptions& options) {
  DdpOptions o = ddp_options(options);
  if (options.local_sgd) o.comm_hook = post_local_sgd_hook(options.local_sgd->warmup_steps);
  if (options.diloco) o.comm_hook = options.diloco->hierarchical ? nullptr : post_local_sgd_hook(0);
  return o;
}

// The ranks DDP averages the gradients over: all, or under hierarchical DiLoCo the node's.
std::shared_ptr<Group> ddp_group_of(const std::shared_ptr<Group>& group,
                                    const StrategyOptions& options) {
  if (!options.diloco || !options.diloco->hierarchical) return group;
  return group->split(group->node_rank(), group->rank());
}

std::unique_ptr<DiLoCo> diloco_of(torch::nn::Module& model, const std::shared_ptr<Group>& group,
                                  const StrategyOptions& options) {
  if (!options.diloco) return nullptr;
  DiLoCoOptions diloco = *options.diloco;
  if (!diloco.hook) diloco.hook = options.comm_hook;  // how the rounds travel (compressed, say)
  return std::make_unique<DiLoCo>(group, model, diloco);
}

std::unique_ptr<PeriodicModelAverager> averager_of(const std::shared_ptr<Group>& group,
                                                   const StrategyOptions& options) {
  if (!options.local_sgd) return nullptr;
  return std::make_unique<PeriodicModelAverager>(group, *options.local_sgd);
}

std::unique_ptr<amp::MasterWeights> master_weights_of(
    const std::shared_ptr<torch::nn::Module>& model, const Precision& precision) {
  if (!precision.master_weights()) return nullptr;
  return std::make_unique<amp::MasterWeights>(model, *precision.master_weights());
}

class DdpStrategy : public Strategy {
 public:
  DdpStrategy(std::shared_ptr<torch::nn::Module> model, std::shared_ptr<Group> group,
              const StrategyOptions& options)
      : Strategy(StrategyKind::kDdp, std::move(model), std::move(group), options),
        master_(master_weights_of(this->model(), precision())),  // first: DDP buckets 16-bit
        ddp_(this->model(), ddp_group_of(group_ptr(), options), ddp_options_of(options)),
        averager_(averager_of(group_ptr(), options)),
        diloco_(diloco_of(*this->model(), group_ptr(), options)) {}

  torch::OrderedDict<std::string, torch::Tensor> optimizer_parameters() const override {
    return master_ ? master_->named_parameters() : model()->named_parameters();
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
  double clip_gradients(torch::optim::Optimizer& optimizer, double max_norm) override {
    if (master_) master_->copy_gradients_to_masters();
    precision().scaler().unscale_(optimizer);
    return torch::nn::utils::clip_grad_norm_(
        master_ ? master_->parameters() : model()->parameters(), max_norm);
  }

  bool rebucket(double bucket_cap_mb) override {
    ddp_.rebucket(bucket_cap_mb);
    return true;
  }

  StepCommunication last_step_communication() const override {
    StepCommunication communication = communication_of(ddp_.last_iteration_stats());
    if (averaged_) communication.reduced_bytes += tensor_bytes(model()->parameters());
    communication.reduced_bytes += diloco_sent_;
    return communication;
  }

  // The averaging and DiLoCo's synchronization change the parameters in place.
  void synchronize(torch::optim::Optimizer& optimizer) override {
    checkpoints().before_update();
    if (averager_) averager_->average_now(*model(), &optimizer);
    if (diloco_) diloco_->synchronize_all();
  }

  ModelStateBytes model_state_bytes(const torch::optim::Optimizer& optimizer) const override {
    const std::vector<torch::Tensor> parameters = model()->parameters();
    ModelStateBytes bytes;
    bytes.parameters = tensor_bytes(parameters);  // 16-bit under master weights, + the masters:
    if (master_) bytes.parameters += tensor_bytes(master_->parameters());
    bytes.gradients = gradient_bytes(parameters);
    bytes.optimizer_state = static_cast<int64_t>(optimizer_state_bytes(optimizer));
    return bytes;
  }

  // Under master weights the checkpoint holds the float32 masters under the model's names
  // (MasterWeights::checkpoint_module), not the model's 16-bit rounding of them; under DiLoCo
  // it keeps DiLoCo's outer state too (a part named "diloco").
  bool load(const std::string& path, TrainingState& state, const LoadOptions& options) override {
    TrainingState loaded = with_parts(state);
    const bool resumed = load_checkpoint(path, group(), loaded, options);
    state.step = loaded.step;
    state.epoch = loaded.epoch;
    if (resumed && master_) master_->loaded_into_masters();
    return resumed;
  }

  void save(const std::string& path, const TrainingState& state) override {
    checkpoints().save(path, with_parts(state));
  }

 protected:
  // Under local SGD every rank calls the averager after every step, stepped or not (a step
  // the scaler skipped on one rank only), so that all ranks average at the same calls.
  bool step_optimizer(torch::optim::Optimizer& optimizer, amp::GradScaler& scaler) override {
    const bool stepped = master_ ? master_->step(optimizer, &scaler) : scaler.step(optimizer);
    averaged_ = averager_ && averager_->average(*model(), &optimizer);
    if (diloco_) {
      const int64_t sent_before = diloco_->sent_bytes();
      diloco_->step();
      diloco_sent_ = diloco_->sent_bytes() - sent_before;
    }
    return stepped;
  }

 private:
  TrainingState with_parts(const TrainingState& state) {
    TrainingState out = with_scaler(state);
    if (master_) out.module = master_->checkpoint_module().get();
    if (diloco_) out.parts.emplace_back("diloco", diloco_.get());
    return out;
  }

  std::unique_ptr<amp::MasterWeights> master_;
  DistributedDataParallel ddp_;
  std::unique_ptr<PeriodicModelAverager> averager_;  // local SGD
  bool averaged_ = false;                            // in the last step
  std::unique_ptr<DiLoCo> diloco_;
  int64_t diloco_sent_ = 0;  // in the last step
};

}  // namespace

std::unique_ptr<Strategy> make_ddp_strategy(std::shared_ptr<torch::nn::Module> model,
                                            std::shared_ptr<Group> group,
                                            const StrategyOptions& options) {
  return std::make_unique<DdpStrategy>(std::move(model), std::move(group), options);
}

}  // namespace cohort::strategy_detail
