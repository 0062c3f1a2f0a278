// plan_detail::measure_probe (run_plan_internal.h): the probe's training step, timed at world 1
// through the strategies the planner needs the cost of.
#include <algorithm>

#include "cohort/comm/inproc_transport.h"
#include "plan/run_plan_internal.h"

namespace cohort::plan_detail {
namespace {

// DDP's gradients through one hook or the other, switched between steps: the probe times
// PowerSGD's arithmetic against the plain allreduce on one DDP (two at once would both reduce).
class SwitchedHook final : public CommHook {
 public:
  SwitchedHook(std::shared_ptr<CommHook> plain, std::shared_ptr<CommHook> other)
      : plain_(std::move(plain)), other_(std::move(other)) {}
  PendingReduction start(Group& group, GradBucket& bucket) override {
    return (use_other ? other_ : plain_)->start(group, bucket);
  }
  std::string name() const override { return use_other ? other_->name() : plain_->name(); }
  bool use_other = false;

 private:
  std::shared_ptr<CommHook> plain_, other_;
};

// The probe's training step through `strategy` over a group of one (no communication, and no
// loss scaling: probe_strategy).
std::function<void()> probe_step(const RunPlanRequest& request, Strategy& strategy,
                                 torch::optim::Optimizer& optimizer) {
  return [&request, &strategy, &optimizer] {
    strategy.zero_grad(optimizer);
    request.probe_loss().backward();
    strategy.step(optimizer);
  };
}

// The probe wrapped as the run's model is, over a group of one, without loss scaling, and
// without what the probe has had done to it already (activation checkpointing) or does not need
// (SyncBatchNorm over one rank).
std::unique_ptr<Strategy> probe_strategy(const RunPlanRequest& request, StrategyKind kind,
                                         std::shared_ptr<CommHook> hook = nullptr) {
  StrategyOptions wrapping = request.options;
  wrapping.timeline = nullptr;  // the probe's copies are not the run's communication
  wrapping.comm_hook = std::move(hook);
  wrapping.local_sgd.reset();
  wrapping.diloco.reset();
  wrapping.precision.scaler.enabled = false;
  wrapping.sync_batchnorm = false;
  wrapping.activation_checkpointing.reset();
  auto alone = Group::create_inproc(std::make_shared<InprocFabric>(1), 0);
  return make_strategy(kind, request.probe, alone, wrapping);
}

// The probe's plain training step at world 1. Under master weights the step is DDP's over a
// group of one (no communication), which holds the model in 16-bit and steps float32 masters as
// the run does; the probe is float32 again after it, as FSDP's probe takes it.
ComputeProfile measure_plain_step(const RunPlanRequest& request) {
  if (request.options.precision.master_weights) {
    auto ddp = probe_strategy(request, StrategyKind::kDdp);
    auto optimizer = request.probe_optimizer(ddp->optimizer_parameters());
    auto compute = ComputeProfile::measure(*request.probe, probe_step(request, *ddp, *optimizer));
    ddp.reset();
    request.probe->to(torch::kFloat32);
    return compute;
  }
  auto optimizer = request.probe_optimizer(request.probe->named_parameters());
  return ComputeProfile::measure(*request.probe, [&] {
    optimizer->zero_grad();
    request.probe_loss().backward();
    optimizer->step();
  });
}

}  // namespace

bool fsdp_is_a_candidate(const PlannerOptions& options) {
  return std::any_of(options.strategies.begin(), options.strategies.end(), is_fsdp);
}

// FSDP comes last: it flattens the probe's parameters.
ComputeProfile measure_probe(const RunPlanRequest& request, const PlannerOptions& options) {
  auto compute = measure_plain_step(request);
  for (int rank : options.powersgd_ranks) {
    PowerSgdOptions powersgd;
    powersgd.rank = rank;
    powersgd.start_iter = 0;  // compress from the first step timed
    auto hook = std::make_shared<SwitchedHook>(allreduce_hook(), powersgd_hook(powersgd));
    auto ddp = probe_strategy(request, StrategyKind::kDdp, hook);
    auto ddp_optimizer = request.probe_optimizer(ddp->optimizer_parameters());
    const auto step = probe_step(request, *ddp, *ddp_optimizer);
    compute.measure_powersgd(
        rank,
        [&] {
          hook->use_other = false;
          step();
        },
        [&] {
          hook->use_other = true;
          step();
        });
  }
  if (!fsdp_is_a_candidate(options)) return compute;
  auto sharded = probe_strategy(request, StrategyKind::kFullShard);
  auto sharded_optimizer = request.probe_optimizer(sharded->optimizer_parameters());
  compute.measure_sharded(probe_step(request, *sharded, *sharded_optimizer));
  return compute;
}

}  // namespace cohort::plan_detail
