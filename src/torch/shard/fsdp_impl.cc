// FullyShardedDataParallel::Impl: construction, errors, memory, step and the rest of the API
// (shard/fsdp_impl.h).
#include "shard/fsdp_impl.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "autograd_compat.h"
#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"
#include "cohort/torch/ddp/comm_hook.h"
#include "model_check.h"
#include "operator_observer.h"
#include "optim/optimizer_check.h"
#include "shard/flat_unit.h"
#include "shard/unit_plan.h"

namespace cohort {
namespace {

void check_options(const FsdpOptions& options, const torch::nn::Module& module) {
  bool on_cpu = true;
  for (const auto& p : module.parameters()) on_cpu = on_cpu && p.device().is_cpu();
  COHORT_CHECK(!options.cpu_offload || !on_cpu,
               "FullyShardedDataParallel: cpu_offload was asked for a model on the CPU; its "
               "shards and optimizer state are in host memory already. Leave cpu_offload off "
               "(it is for models on a CUDA device)");
  const auto& param_dtype = options.mixed_precision.param_dtype;
  COHORT_CHECK(!param_dtype || c10::isFloatingType(*param_dtype),
               "FullyShardedDataParallel: MixedPrecisionPolicy::param_dtype must be a floating "
               "point dtype (torch::kBFloat16, torch::kFloat16), not ",
               param_dtype ? c10::toString(*param_dtype) : "");
  COHORT_CHECK(!param_dtype || options.strategy != ShardingStrategy::kNoShard,
               "FullyShardedDataParallel: MixedPrecisionPolicy::param_dtype is not available "
               "with NO_SHARD (DistributedDataParallel underneath computes with the parameters' "
               "own dtype and keeps no master copy). Use SHARD_GRAD_OP with param_dtype (each "
               "unit gathered once per step, in param_dtype), or leave param_dtype unset");
  COHORT_CHECK(!options.cpu_offload || options.strategy != ShardingStrategy::kNoShard,
               "FullyShardedDataParallel: cpu_offload is not available with NO_SHARD "
               "(DistributedDataParallel underneath keeps the whole model and its gradients on "
               "the device); use FULL_SHARD or SHARD_GRAD_OP with cpu_offload");
}

// kNoShard is DistributedDataParallel: a 16-bit reduce_dtype becomes DDP's compression hook
// of that dtype (the buckets are cast, averaged and cast back, as FSDP's reduce-scatter does).
DdpOptions no_shard_ddp_options(const FsdpOptions& options) {
  DdpOptions ddp = options.ddp;
  const auto& reduce = options.mixed_precision.reduce_dtype;
  if (!reduce) return ddp;
  COHORT_CHECK(*reduce == torch::kBFloat16 || *reduce == torch::kFloat16,
               "FullyShardedDataParallel: under NO_SHARD MixedPrecisionPolicy::reduce_dtype may "
               "be torch::kBFloat16 or torch::kFloat16 (DistributedDataParallel's compression "
               "hooks), not ",
               c10::toString(*reduce), "; leave it unset to reduce in the parameters' dtype");
  COHORT_CHECK(ddp.comm_hook == nullptr,
               "FullyShardedDataParallel: under NO_SHARD MixedPrecisionPolicy::reduce_dtype is "
               "DistributedDataParallel's compression hook, and FsdpOptions::ddp.comm_hook is "
               "set as well; set one of them");
  ddp.comm_hook = *reduce == torch::kBFloat16 ? bf16_compress_hook() : fp16_compress_hook();
  return ddp;
}

std::string describe(const std::string& kind, const std::string& name, const torch::Tensor& t) {
  std::ostringstream out;
  out << kind << " '" << name << "' " << c10::toString(t.scalar_type()) << " " << t.sizes();
  return out.str();
}

}  // namespace

FullyShardedDataParallel::Impl::Impl(std::shared_ptr<torch::nn::Module> module,
                                     std::shared_ptr<Group> group, FsdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(std::move(options)) {
  COHORT_CHECK(module_ != nullptr, "FullyShardedDataParallel: the module is null");
  COHORT_CHECK(group_ != nullptr, "FullyShardedDataParallel: the group is null");
  check_options(options_, *module_);
  // Every gather allocates a unit's storage and every release frees it: without the tuning
  // those blocks are mmapped and faulted in again on every use (malloc_tuning.cc).
  tune_malloc_for_training();
  if (options_.strategy == ShardingStrategy::kNoShard) {
    ddp_.emplace(module_, group_, no_shard_ddp_options(options_));
    return;
  }
  make_groups();
  auto plans = plan_units(*module_, options_);
  buffers_ = module_->buffers();
  check_and_broadcast(plans);
  cut_units(std::move(plans));
  watch_operators(this);
}

FullyShardedDataParallel::Impl::~Impl() {
  if (ddp_) return;
  unwatch_operators(this);
  // Issue 35: a gather over the broken group printed a warning before the real error.
  if (std::uncaught_exceptions() == 0 && !abandoned_) restore_whole_parameters();
}

void FullyShardedDataParallel::Impl::abandon(std::exception_ptr cause) {
  if (ddp_ || abandoned_) return;
  abandoned_ = true;
  abort_in_flight(std::move(cause));
  const UnwatchedScope own_work;
  torch::NoGradGuard no_grad;
  for (auto& unit : units_) {
    unit->release();
    for (const UnitParameter& p : unit->parameters()) {
      if (p.tensor.grad_fn()) autograd_compat::clear_gradient_route(p.tensor);
      p.tensor.set_data(
          torch::zeros(p.tensor.sizes(), p.tensor.options().dtype(unit->shard_dtype())));
    }
  }
}

void FullyShardedDataParallel::Impl::make_groups() {
  CollectiveOptions constructor;
  constructor.site = call_sites::kFsdpConstructor;
  shard_group_ = group_;
  if (options_.strategy == ShardingStrategy::kHybridShard) {
    COHORT_CHECK(group_->size() == group_->num_nodes() * group_->local_size(),
                 "FullyShardedDataParallel: HYBRID_SHARD needs the same number of ranks on "
                 "every node (each node holds one whole replica, cut into as many shards as "
                 "it has ranks); this group has ",
                 group_->size(), " ranks on ", group_->num_nodes(),
                 " nodes. Start as many ranks per node, or use FULL_SHARD");
    shard_group_ = group_->split(group_->node_rank(), group_->rank(), constructor);
    replica_group_ = group_->split(group_->local_rank(), group_->rank(), constructor);
  }
  reduce_group_ = shard_group_->split(0, shard_group_->rank(), constructor);
}

void FullyShardedDataParallel::Impl::check_and_broadcast(const std::vector<UnitPlan>& plans) {
  std::vector<std::string> entries;
  std::vector<torch::Tensor> tensors;
  for (const UnitPlan& plan : plans) {
    for (const UnitParameter& p : plan.parameters) {
      entries.push_back(
          "unit '" + plan.name + "' " +
          describe(p.tensor.requires_grad() ? "parameter" : "frozen parameter", p.name, p.tensor));
      tensors.push_back(p.tensor);
    }
  }
  for (const auto& b : module_->named_buffers())
    entries.push_back(describe("buffer", b.key(), b.value()));
  check_same_on_all_ranks(*group_, entries, "parameter/buffer", call_sites::kFsdpConstructor);
  broadcast_coalesced(*group_, tensors, 0, call_sites::kFsdpConstructor);
  broadcast_coalesced(*group_, buffers_, 0, call_sites::kFsdpConstructor);
}

void FullyShardedDataParallel::Impl::cut_units(std::vector<UnitPlan> plans) {
  for (UnitPlan& plan : plans) {
    const auto own = plan.parameters.front().tensor.scalar_type();
    const auto compute = options_.mixed_precision.param_dtype.value_or(own);
    units_.push_back(std::make_unique<FlatUnit>(std::move(plan), shard_group_->size(),
                                                shard_group_->rank(), compute,
                                                options_.cpu_offload));
  }
  const size_t n = units_.size();
  for (size_t u = 0; u < n; ++u) {
    if (is_root(u)) root_ = static_cast<int>(u);
    unit_by_storage_[units_[u]->storage()] = static_cast<int>(u);
    for (const ShardPart& part : units_[u]->shard_parts()) {
      shard_owner_[part.tensor.unsafeGetTensorImpl()] = u;
    }
  }
  // Reduce-scatter order: the units in reverse, the root (usually the first used) last.
  for (size_t u = n; u-- > 0;) {
    if (!is_root(u) && !units_[u]->trainable().empty()) reduce_order_.push_back(u);
  }
  for (size_t u = 0; u < n; ++u) {
    if (is_root(u) && !units_[u]->trainable().empty()) reduce_order_.push_back(u);
  }
  iteration_ = Iteration(n);
  previous_forward_order_.assign(n, -1);
  previous_backward_order_.assign(n, -1);
}

void FullyShardedDataParallel::Impl::keep_error(std::exception_ptr error) {
  if (!pending_error_) pending_error_ = error;
}

void FullyShardedDataParallel::Impl::raise_pending_error() {
  if (!pending_error_) return;
  auto error = pending_error_;
  pending_error_ = nullptr;
  std::rethrow_exception(error);
}

size_t FullyShardedDataParallel::Impl::gradient_bytes() const {
  size_t bytes = 0;
  std::unordered_set<const void*> storages;
  const auto count = [&](const torch::Tensor& t) {
    if (t.defined() && storages.insert(t.storage().unsafeGetStorageImpl()).second) {
      bytes += t.storage().nbytes();
    }
  };
  for (const auto& unit : units_) {
    for (const ShardPart& part : unit->shard_parts()) count(part.tensor.grad());
  }
  for (const auto& [u, local] : accumulated_) count(local);
  for (const auto& rs : iteration_.reductions) {
    count(rs.input);
    count(rs.block);
  }
  for (const auto& ready : iteration_.ready) count(ready);
  return bytes;
}

FsdpMemoryReport FullyShardedDataParallel::Impl::memory(
    const torch::optim::Optimizer* optimizer) const {
  FsdpMemoryReport report;
  for (const auto& unit : units_) {
    report.parameter_shards += unit->shard_bytes();
    if (unit->state() != FlatUnit::State::kFreed) report.gathered += unit->gathered_bytes();
  }
  report.peak_gathered = std::max(peak_gathered_, report.gathered);
  report.gradients = gradient_bytes();
  report.peak_gradients = std::max(peak_gradients_, report.gradients);
  if (optimizer != nullptr) report.optimizer_state = optimizer_state_bytes(*optimizer);
  return report;
}

std::vector<torch::Tensor> FullyShardedDataParallel::Impl::shard_tensors() const {
  std::vector<torch::Tensor> tensors;
  for (const auto& item : named_shards()) tensors.push_back(item.value());
  return tensors;
}

torch::OrderedDict<std::string, torch::Tensor> FullyShardedDataParallel::Impl::named_shards()
    const {
  std::unordered_map<std::string, torch::Tensor> by_name;
  for (const auto& unit : units_) {
    for (const ShardPart& part : unit->shard_parts()) {
      by_name[unit->parameters()[part.parameter].name] = part.tensor;
    }
  }
  return in_module_order(by_name);
}

torch::OrderedDict<std::string, FullyShardedDataParallel::ShardSpan>
FullyShardedDataParallel::Impl::shard_spans() const {
  std::unordered_map<std::string, ShardSpan> by_name;
  for (const auto& unit : units_) {
    for (const ShardPart& part : unit->shard_parts()) {
      const UnitParameter& p = unit->parameters()[part.parameter];
      const int64_t offset = part.range.length > 0 ? part.range.parameter_offset : 0;
      by_name[p.name] = ShardSpan{offset, part.range.length, p.tensor.sizes().vec()};
    }
  }
  return in_module_order(by_name);
}

void FullyShardedDataParallel::Impl::check_optimizer(
    const torch::optim::Optimizer& optimizer) const {
  check_sharded_optimizer(
      optimizer, "FullyShardedDataParallel", "fsdp", shard_group_->size(),
      [this](const torch::Tensor& t) { return shard_owner_.count(t.unsafeGetTensorImpl()) != 0; });
}

void FullyShardedDataParallel::Impl::step(torch::optim::Optimizer& optimizer) {
  agree_on_optimizer(*group_, optimizer, "FullyShardedDataParallel", agreed_optimizer_);
  if (ddp_) {
    optimizer.step();
    return;
  }
  raise_pending_error();
  check_optimizer(optimizer);
  const UnwatchedScope own_work;
  optimizer.step();
}

void FullyShardedDataParallel::Impl::set_full_precision(bool full) {
  if (!options_.mixed_precision.param_dtype) return;
  release_all();
  for (auto& unit : units_) unit->set_full_precision(full);
}

void FullyShardedDataParallel::Impl::gather_all() {
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->state() == FlatUnit::State::kFreed) {
      start_gather(static_cast<int>(u), /*for_iteration=*/false);
    }
  }
  for (auto& unit : units_) unit->wait_gathered();
}

void FullyShardedDataParallel::Impl::regather() {
  if (ddp_) return;
  const UnwatchedScope own_work;
  std::vector<int> gathered;
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u]->state() == FlatUnit::State::kFreed) continue;
    units_[u]->release();
    gathered.push_back(static_cast<int>(u));
  }
  for (int u : gathered) start_gather(u);
  for (int u : gathered) units_[u]->wait_gathered();
}

void FullyShardedDataParallel::Impl::restore_whole_parameters() noexcept {
  try {
    const UnwatchedScope own_work;
    set_full_precision(true);
    gather_all();
    torch::NoGradGuard no_grad;
    for (auto& unit : units_) {
      for (const UnitParameter& p : unit->parameters()) {
        if (p.tensor.grad_fn()) autograd_compat::clear_gradient_route(p.tensor);
        p.tensor.set_data(p.tensor.detach().clone());
      }
      unit->release();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "cohort: FullyShardedDataParallel could not gather the parameters back when "
                 "it was destroyed (%s); the module's parameters hold no memory now\n",
                 e.what());
  }
}

}  // namespace cohort
