// FullyShardedDataParallel (cohort/torch/shard/fsdp.h): ZeRO stage 3 for libtorch modules. The
// API forwards to the Impl (shard/fsdp_impl.h, Note [FSDP interception]).

#include "cohort/torch/shard/fsdp.h"

#include <algorithm>

#include "shard/fsdp_access.h"
#include "shard/fsdp_impl.h"
#include "shard/shard_holdings.h"

namespace cohort {

const char* sharding_strategy_name(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kFullShard: return "FULL_SHARD";
    case ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case ShardingStrategy::kNoShard: return "NO_SHARD";
    case ShardingStrategy::kHybridShard: return "HYBRID_SHARD";
  }
  return "?";
}

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<torch::nn::Module> module,
                                                   std::shared_ptr<Group> group,
                                                   FsdpOptions options)
    : impl_(std::make_unique<Impl>(std::move(module), std::move(group), std::move(options))) {}
FullyShardedDataParallel::~FullyShardedDataParallel() = default;

std::vector<torch::Tensor> FullyShardedDataParallel::parameters() const {
  if (impl_->ddp_) {
    std::vector<torch::Tensor> trainable;
    for (const auto& p : impl_->module_->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    return trainable;
  }
  return impl_->shard_tensors();
}

torch::OrderedDict<std::string, torch::Tensor> FullyShardedDataParallel::named_parameters() const {
  if (impl_->ddp_) {
    torch::OrderedDict<std::string, torch::Tensor> trainable;
    for (const auto& p : impl_->module_->named_parameters()) {
      if (p.value().requires_grad()) trainable.insert(p.key(), p.value());
    }
    return trainable;
  }
  return impl_->named_shards();
}

torch::OrderedDict<std::string, FullyShardedDataParallel::ShardSpan>
FullyShardedDataParallel::shard_spans() const {
  if (!impl_->ddp_) return impl_->shard_spans();
  torch::OrderedDict<std::string, ShardSpan> whole;
  for (const auto& item : named_parameters()) {
    whole.insert(item.key(), ShardSpan{0, item.value().numel(), item.value().sizes().vec()});
  }
  return whole;
}

void FullyShardedDataParallel::step(torch::optim::Optimizer& optimizer) {
  impl_->step(optimizer);
}

FullyShardedDataParallel::NoSync::NoSync(FullyShardedDataParallel* owner) : owner_(owner) {
  if (owner_->impl_->ddp_) {
    ddp_ = owner_->impl_->ddp_->no_sync();
  } else {
    owner_->impl_->no_sync_ = true;
  }
}
FullyShardedDataParallel::NoSync::~NoSync() {
  if (owner_ != nullptr && !owner_->impl_->ddp_) owner_->impl_->no_sync_ = false;
}
FullyShardedDataParallel::NoSync::NoSync(NoSync&& other) noexcept
    : owner_(other.owner_), ddp_(std::move(other.ddp_)) {
  other.owner_ = nullptr;
}

FullyShardedDataParallel::NoSync FullyShardedDataParallel::no_sync() {
  impl_->raise_pending_error();
  return NoSync(this);
}

void FullyShardedDataParallel::reshard() {
  if (impl_->ddp_) return;
  impl_->release_all();
  impl_->raise_pending_error();
}

FullyShardedDataParallel::FullParameters::FullParameters(FullyShardedDataParallel* owner,
                                                         bool writeback)
    : owner_(owner), writeback_(writeback) {
  Impl& impl = *owner_->impl_;
  if (impl.ddp_) return;
  impl.raise_pending_error();
  const UnwatchedScope own_work;
  if (impl.full_parameters_scopes_ == 0) impl.set_full_precision(true);
  impl.gather_all();
  ++impl.full_parameters_scopes_;
}

FullyShardedDataParallel::FullParameters::~FullParameters() {
  if (owner_ == nullptr || owner_->impl_->ddp_) return;
  Impl& impl = *owner_->impl_;
  --impl.full_parameters_scopes_;
  if (impl.full_parameters_scopes_ > 0) return;
  const UnwatchedScope own_work;
  for (auto& unit : impl.units_) {
    if (writeback_ && unit->state() == FlatUnit::State::kGathered) unit->write_back_shard();
  }
  impl.release_all();
  impl.set_full_precision(false);
}

FullyShardedDataParallel::FullParameters::FullParameters(FullParameters&& other) noexcept
    : owner_(other.owner_), writeback_(other.writeback_) {
  other.owner_ = nullptr;
}

FullyShardedDataParallel::FullParameters FullyShardedDataParallel::full_parameters(bool writeback) {
  return FullParameters(this, writeback);
}

FsdpMemoryReport FullyShardedDataParallel::memory(const torch::optim::Optimizer* optimizer) const {
  if (impl_->ddp_) {
    FsdpMemoryReport report;
    for (const auto& p : impl_->module_->parameters()) {
      report.gathered += p.nbytes();
      if (p.grad().defined()) report.gradients += p.grad().nbytes();
    }
    report.peak_gathered = report.gathered;
    report.peak_gradients = report.gradients;
    if (optimizer != nullptr) report.optimizer_state = optimizer_state_bytes(*optimizer);
    return report;
  }
  return impl_->memory(optimizer);
}

void FullyShardedDataParallel::reset_peak_memory() {
  impl_->peak_gathered_ = 0;
  impl_->peak_gradients_ = 0;
}

std::vector<std::string> FullyShardedDataParallel::unit_names() const {
  std::vector<std::string> names;
  for (const auto& unit : impl_->units_) names.push_back(unit->name());
  return names;
}

torch::nn::Module& FullyShardedDataParallel::module() const {
  return *impl_->module_;
}
Group& FullyShardedDataParallel::group() const {
  return *impl_->group_;
}
const IterationStats& FullyShardedDataParallel::last_iteration_stats() const {
  return impl_->ddp_ ? impl_->ddp_->last_iteration_stats() : impl_->last_stats_;
}

Group& FullyShardedDataParallel::shard_group() const {
  return impl_->shard_group_ ? *impl_->shard_group_ : *impl_->group_;
}
ShardingStrategy FullyShardedDataParallel::strategy() const {
  return impl_->options_.strategy;
}

namespace detail {

std::vector<FsdpParameterPart> FsdpAccess::parts(const FullyShardedDataParallel& fsdp) {
  std::vector<FsdpParameterPart> parts;
  for (const auto& unit : fsdp.impl_->units_) {
    for (size_t p = 0; p < unit->parameters().size(); ++p) {
      parts.push_back({unit->parameters()[p].tensor, unit->part_of(p)});
    }
  }
  return parts;
}

int FsdpAccess::replicas(const FullyShardedDataParallel& fsdp) {
  const auto& replica_group = fsdp.impl_->replica_group_;
  return replica_group ? replica_group->size() : 1;
}

int FsdpAccess::replica(const FullyShardedDataParallel& fsdp) {
  const auto& replica_group = fsdp.impl_->replica_group_;
  return replica_group ? replica_group->rank() : 0;
}

void FsdpAccess::regather(const FullyShardedDataParallel& fsdp) {
  fsdp.impl_->regather();
}

void FsdpAccess::abandon(FullyShardedDataParallel& fsdp, std::exception_ptr cause) {
  fsdp.impl_->abandon(std::move(cause));
}

}  // namespace detail

ShardedParameters FullyShardedDataParallel::sharded_parameters() {
  ShardedParameters view;
  view.shards = parameters();
  view.group = &group();
  if (strategy() != ShardingStrategy::kNoShard) {  // kNoShard: whole, equal gradients
    view.norm_group = &shard_group();
    view.flag_group = group().size() > 1 ? &group() : nullptr;
  }
  view.module = &module();
  view.step = [this](torch::optim::Optimizer& optimizer) { step(optimizer); };
  view.holdings = [this] { return detail::fsdp_holdings(*this); };
  return view;
}

}  // namespace cohort
