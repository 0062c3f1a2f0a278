#include "elastic/sharded_run.h"

#include <algorithm>

#include "call_sites.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/piece_install.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "cohort/torch/optim/trust_ratio.h"
#include "cohort/torch/tensor_buffer.h"
#include "elastic/buddy_copy.h"
#include "elastic/buddy_refresh.h"
#include "elastic/elastic_checkpoint.h"
#include "elastic/optimizer_broadcast.h"
#include "shard/fsdp_access.h"

namespace cohort::detail {
namespace {

// Each param group's options (a schedule's learning rate) of `from`, on `to`'s groups.
void copy_group_options(const torch::optim::Optimizer& from, torch::optim::Optimizer& to) {
  const size_t groups = std::min(from.param_groups().size(), to.param_groups().size());
  for (size_t g = 0; g < groups; ++g) {
    to.param_groups()[g].set_options(from.param_groups()[g].options().clone());
  }
}

}  // namespace

ShardedRun::ShardedRun(std::shared_ptr<torch::nn::Module> module, ElasticOptimizerFactory factory,
                       const ElasticTrainerOptions& options)
    : module_(std::move(module)), factory_(std::move(factory)), options_(options) {
  COHORT_CHECK(factory_, "ElasticTrainer: pass an optimizer factory for a sharded strategy");
  COHORT_CHECK(options.buddy_refresh_steps >= 1, "ElasticTrainer: buddy_refresh_steps is ",
               options.buddy_refresh_steps,
               "; give at least 1 (the steps a buddy copy is kept as a log between refreshes)");
  if (!is_fsdp(options.strategy)) return;
  // The kind says how FSDP shards; FsdpOptions::strategy may only say the same, or be left at
  // its default.
  const ShardingStrategy given = options.fsdp.strategy;
  fsdp_options_ = options.fsdp;
  fsdp_options_.strategy = fsdp_sharding_of(options.strategy);
  COHORT_CHECK(given == FsdpOptions{}.strategy || given == fsdp_options_.strategy,
               "ElasticTrainer: FsdpOptions::strategy ", sharding_strategy_name(given),
               " is not elastic, or not what ElasticTrainerOptions::strategy ",
               strategy_name(options.strategy),
               " says; leave it and give the strategy as full_shard, shard_grad_op or "
               "hybrid_shard (docs/elastic.md)");
  COHORT_CHECK(!fsdp_options_.cpu_offload,
               "ElasticTrainer: FsdpOptions::cpu_offload is not elastic yet (docs/elastic.md, "
               "\"Limits\"); turn it off");
  // Master weights: the units gathered in the 16-bit dtype, their float32 shards the masters,
  // which the pieces, buddy copies and checkpoints carry as they are (as make_strategy's FSDP).
  auto& param_dtype = fsdp_options_.mixed_precision.param_dtype;
  if (options.precision.master_weights) {
    COHORT_CHECK(!param_dtype || *param_dtype == options.precision.compute_dtype,
                 "ElasticTrainer: FsdpOptions' param_dtype ", c10::toString(*param_dtype),
                 " is not the master weights' compute dtype ",
                 c10::toString(options.precision.compute_dtype), "; leave it unset");
    param_dtype = options.precision.compute_dtype;
  }
}

// Not drop_wrapper(): the group is whole here, and FSDP's destructor gathers the parameters
// back into the module (collective; every member destroys its trainer after the last step).
ShardedRun::~ShardedRun() = default;

void ShardedRun::drop_wrapper(std::exception_ptr cause) {
  if (fsdp_) FsdpAccess::abandon(*fsdp_, std::move(cause));
  if (zero_) {
    // ZeRO's shards are views of the parameters' memory, and the next wrapper's constructor
    // writes rank 0's values into the parameters: they get memory of their own first, so that
    // this member's shards (its pieces, possibly newer than rank 0's copy of them after a
    // failed all-gather) stay as they are. Costs one copy of the parameters, until the exchange.
    torch::NoGradGuard no_grad;
    for (auto& parameter : module_->parameters()) parameter.set_data(parameter.detach().clone());
  }
  zero_.reset();
  fsdp_.reset();
  gradients_.reset();
  group_.reset();
}

// HYBRID_SHARD needs the same number of members on every node (each node holds one replica).
// A generation without it (a node lost some of its members) shards over all members
// (FULL_SHARD) until the nodes are even again; every member's node size decides it, so that
// all agree. A node lost whole leaves the others even: its replica was a copy.
FsdpOptions ShardedRun::generation_fsdp_options(Group& group, const Membership& m) const {
  FsdpOptions fsdp = fsdp_options_;
  if (fsdp.strategy != ShardingStrategy::kHybridShard) return fsdp;
  auto sizes = torch::tensor(
      {static_cast<int64_t>(group.local_size()), -static_cast<int64_t>(group.local_size())},
      torch::kInt64);
  CollectiveOptions max;
  max.op = ReduceOp::kMax;
  max.site = call_sites::kElasticHeal;
  group.allreduce(tensor_buffer(sizes), max);
  const int64_t most = sizes[0].item<int64_t>(), fewest = -sizes[1].item<int64_t>();
  if (most == fewest) return fsdp;
  fsdp.strategy = ShardingStrategy::kFullShard;
  if (m.rank == 0) {
    COHORT_LOG(kWarn, "generation ", m.generation, ": its nodes hold ", fewest, " to ", most,
               " members, and HYBRID_SHARD needs as many on each; it shards over all ", m.size,
               " (FULL_SHARD) until they are even again");
  }
  return fsdp;
}

void ShardedRun::build_wrapper(std::shared_ptr<Group> group, const Membership& m) {
  group_ = group;
  if (is_fsdp(options_.strategy)) {
    const FsdpOptions fsdp = generation_fsdp_options(*group, m);
    fsdp_ = std::make_unique<FullyShardedDataParallel>(module_, std::move(group), fsdp);
    return;
  }
  ZeroOptions zero = options_.zero;
  zero.stage = options_.strategy == StrategyKind::kZero2 ? 2 : 1;
  zero_ = std::make_unique<ZeroDataParallel>(module_, std::move(group), zero);
}

// Note [Buddy copies]: a member whose vote failed where others' completed steps now.
void ShardedRun::catch_up(int64_t target) {
  if (pending_ && own_.held() && target == own_.committed + 1) commit();
  pending_ = false;
  log_.drop_incoming();
}

void ShardedRun::adopt(std::shared_ptr<Group> group, const Membership& m, int64_t& committed,
                       ElasticSampler& sampler) {
  const int64_t target = m.committed_step();
  catch_up(target);
  if (buddy_.held()) log_.replay(buddy_);  // the copy at its committed step, for the exchange
  build_wrapper(group, m);
  HeldPieces fresh;
  fresh.holdings = view().holdings();
  fresh.optimizer = factory_(zero_ ? zero_->named_parameters() : fsdp_->named_parameters());
  COHORT_CHECK(
      codec_of(*fresh.optimizer) != nullptr &&
          dynamic_cast<const optim::TrustRatioOptimizer*>(fresh.optimizer.get()) == nullptr,
      "ElasticTrainer: a sharded strategy re-slices the optimizer's state by element, so "
      "it takes SGD, Adam, AdamW, Adagrad and RMSprop only (LARS and LAMB need "
      "whole-tensor norms)");
  fresh.generation = m.generation;
  fresh.rank = m.rank;
  fresh.world = m.size;
  fresh.committed = target;
  const HeldPieces* held[2] = {&own_, &buddy_};
  ExchangePlan plan = plan_exchange(*group, held, target, fresh);
  if (!plan.lost.empty()) resume_from_checkpoint(plan, fresh, committed, sampler);
  if (plan.nothing_held) resume_at_start(fresh, committed, sampler);
  if (plan.nothing_held || !plan.lost.empty()) {  // a start, or a resume: the fresh state
    fresh.committed = committed;
    held[0] = &fresh;
    held[1] = nullptr;
    plan = plan_exchange(*group, held, committed, fresh);
    COHORT_INTERNAL_ASSERT(plan.lost.empty(), "fresh pieces lost ", plan.lost_text());
  }
  carry_options(fresh);
  HeldPieces buddy;
  exchange_pieces(*group, plan, held, fresh, options_.buddy_copies ? &buddy : nullptr, factory_);
  if (buddy.optimizer) copy_group_options(*fresh.optimizer, *buddy.optimizer);
  own_ = std::move(fresh);
  own_.committed = committed;
  buddy_ = std::move(buddy);
  log_.reset();  // the new copy's ranges are cut anew
  refresher_.reset();
  gradients_.reset();
  if (buddy_.optimizer) {
    gradients_ = std::make_unique<BuddyGradients>(*group, own_.holdings);
    buddy_.generation = m.generation;
    buddy_.rank = (m.rank + m.size - 1) % m.size;
    buddy_.world = m.size;
    buddy_.committed = committed;
  }
  if (zero_) ranges_ = all_shard_ranges(*group, own_.holdings, call_sites::kElasticHeal);
}

// Rank 0 holds the newest options (a schedule's learning rate): every member takes them.
void ShardedRun::carry_options(HeldPieces& fresh) {
  if (group_->rank() == 0 && own_.optimizer) copy_group_options(*own_.optimizer, *fresh.optimizer);
  broadcast_optimizer_options(*group_, *fresh.optimizer);
}

void ShardedRun::resume_from_checkpoint(const ExchangePlan& plan, HeldPieces& fresh,
                                        int64_t& committed, ElasticSampler& sampler) {
  const std::string lost = plan.lost_text() + " of generation " + std::to_string(plan.generation);
  const std::string why = options_.buddy_copies ? " (lost together with the members holding their "
                                                  "buddy copies)"
                                                : " (buddy copies are off)";
  if (options_.checkpoint_dir.empty()) {
    throw ElasticError("ElasticTrainer: the shards of " + lost + " were lost" + why +
                       ", and no checkpoint directory is set (ElasticTrainerOptions::"
                       "checkpoint_dir): the job cannot go on");
  }
  LoadOptions own;
  own.any_job = true;  // the job's own directory, written since it started
  const auto step =
      load_elastic_checkpoint(options_.checkpoint_dir, view(), *fresh.optimizer, sampler, own);
  if (!step) {
    throw ElasticError("ElasticTrainer: the shards of " + lost + " were lost" + why + ", and '" +
                       options_.checkpoint_dir + "' holds no checkpoint yet: the job cannot go on");
  }
  committed = *step;
  if (group_->rank() == 0) {
    COHORT_LOG(kWarn, plan.lost_text(), "'s shards were lost", why,
               ": resumed from the checkpoint of step ", committed);
  }
}

// A job's start: the checkpoint in checkpoint_dir, if there is one it may resume.
void ShardedRun::resume_at_start(HeldPieces& fresh, int64_t& committed, ElasticSampler& sampler) {
  if (options_.checkpoint_dir.empty()) return;
  const auto step = load_elastic_checkpoint(options_.checkpoint_dir, view(), *fresh.optimizer,
                                            sampler, options_.resume);
  if (!step) return;
  committed = *step;
  if (group_->rank() == 0) {
    COHORT_LOG(kInfo, "resumed from the checkpoint in '", options_.checkpoint_dir, "' of step ",
               committed);
  }
}

void ShardedRun::before_step() {
  own_.optimizer->zero_grad();
}

// Every member's log holds the same number of steps (they commit the same ones), so all refresh
// at the same step.
void ShardedRun::after_backward() {
  if (buddy_.held()) {
    if (static_cast<int64_t>(log_.steps()) >= options_.buddy_refresh_steps) {
      refresher_.refresh(*group_, own_, buddy_, log_);
    }
    gradients_->exchange(*group_, own_.holdings, log_.incoming(gradients_->elements()));
  }
  pending_ = true;
}

void ShardedRun::commit() {
  torch::NoGradGuard no_grad;
  own_.optimizer->step();
  if (buddy_.held()) {
    // The predecessor stepped its shards with its groups' options as they are now (a schedule's
    // LR, ElasticTrainerOptions::lr_schedule): the log keeps them for the copy's replay.
    log_.commit_incoming(*own_.optimizer);
    ++buddy_.committed;
  }
  ++own_.committed;
  pending_ = false;
}

void ShardedRun::publish() {
  if (zero_ && group_->size() > 1) {
    gather_full_parameters(*group_, own_.holdings, ranges_, call_sites::kZeroParameters);
  }
}

void ShardedRun::save_checkpoint(int64_t committed, const ElasticSampler& sampler,
                                 const Membership& m) {
  save_elastic_checkpoint(options_.checkpoint_dir, view(), *own_.optimizer, committed, sampler, m);
}

torch::optim::Optimizer& ShardedRun::optimizer() {
  return *own_.optimizer;
}

ShardedParameters ShardedRun::view() {
  return zero_ ? zero_->sharded_parameters() : fsdp_->sharded_parameters();
}

}  // namespace cohort::detail
