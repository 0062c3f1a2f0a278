// FullyShardedDataParallel (cohort/torch/fsdp.h): ZeRO stage 3 for libtorch modules.
//
// Note [FSDP interception]
// libtorch has no forward or backward hooks on modules, and the bar is that neither the model
// class nor its forward() changes. So cohort intercepts operators, not modules: a
// RecordFunction observer (shard/operator_observer.h) sees, before every operator on the
// training thread, its inputs. Every parameter of a unit is a view of the unit's one flat
// storage (Note [FSDP flat units]), and so is every tensor made from a parameter by a view
// operation (t(), narrow(), ...); an input over a unit's storage means the operator is about
// to read that unit, which is gathered first if it is not. The observer also sees the range
// of autograd sequence numbers each such operator created: those backward nodes may read the
// unit's parameters (saved for backward), so before any of them runs (the observer sees
// backward nodes too, by sequence number) the unit is gathered again. Reading is therefore
// always safe, whatever was freed: a freed unit is simply gathered again on its next use.
//
// What is freed when (Note [FSDP schedule]):
//  - forward: the unit last used (not the root) is freed when an operator uses another unit,
//    under kFullShard, and under any strategy when gradients are off (evaluation); the root
//    unit (parameters outside every unit, e.g. embeddings) is gathered with the first unit an
//    iteration uses, whether or not this rank reads it (so a parameter of the root that only
//    some ranks use costs no mismatched all-gather), and stays until the end of backward;
//  - backward: a unit is freed when its gradient node has run (all its gradients arrived);
//  - the end of backward frees what is left. A forward without backward leaves its last unit
//    and the root gathered until the next forward moves on, or reshard().
// Prefetch: the order in which units were first used in the previous iteration's forward and
// backward is kept; when a unit is used, the next one in that order starts gathering.
//
// Gradients: each unit's trainable parameters are outputs of one node of the unit's own
// (autograd_compat::route_gradients), which the engine runs once every gradient of the pass
// has arrived, however many times and wherever the parameters were used. It flattens them and
// starts a reduce-scatter. Reduce-scatters run on a group of their own (a split of the shard
// group) in a fixed order (units in reverse order, the root last; a unit ready early waits
// for those before it), so their order is the same on every rank whatever parameters each
// rank used, and it cannot interleave differently with the all-gathers on the main group. At
// the end of backward the units no rank's backward reached are reduced (zeros), the blocks
// land in the shards' .grad (accumulating, as .grad does), only for parameters some rank gave
// a gradient (one small max-allreduce of a used map, so that an unused parameter keeps an
// undefined .grad as in one process), and rank 0's buffers are broadcast.
#include "cohort/torch/fsdp.h"

#include <ATen/SequenceNumber.h>

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
#include "cohort/core/error.h"
#include "cohort/torch/comm_hook.h"
#include "cohort/torch/tensor_buffer.h"
#include "cohort/torch/zero.h"
#include "model_check.h"
#include "shard/flat_unit.h"
#include "shard/fsdp_access.h"
#include "shard/grad_norm.h"
#include "shard/operator_observer.h"
#include "shard/optimizer_check.h"
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

struct ReduceScatter {
  torch::Tensor input;  // the unit's flat gradient, reduced in place; released once it has ended
  torch::Tensor block;  // this rank's block: a view of input, else a copy waiting to land
  bool landed = false;  // the block is in the shards' .grad already
  size_t input_bytes = 0;
  torch::ScalarType input_dtype = torch::kFloat32;  // what went on the wire
  std::shared_ptr<Work> work;
  Clock::time_point ready_at;  // when the unit's gradients were all there
};

// Note [FSDP gradients in flight]
// A unit's flat gradient is as large as the unit. Were every reduce-scatter left to finish on
// its own until the end of backward, a backward that outruns the network would hold the whole
// model's gradient at once, as DDP does, and stage 3 would save nothing on gradients. So each
// time a unit's gradients arrive, the flat gradients of finished reduce-scatters are released,
// and while more than this many are still in flight, backward waits for the oldest (counted in
// exposed_comm_ms). Two keeps one reduce-scatter running while the next unit's is queued.
// Nothing else of the reductions is held: a reduce-scatter writes this rank's block inside its
// own input (in place, docs/algorithms.md), and when it has ended the block lands in the
// shards' .grad at once if every part's .grad is there already (adding the zeros of a part no
// rank used leaves that .grad as it was, so the end of backward's used map is not needed). Only
// where it cannot (a first backward, .grad set to none, or HYBRID_SHARD, whose blocks are still
// to be averaged over the replicas) is the block copied out to wait for the end of backward.
// Separate output blocks, kept to the end of backward, held another 1/W of the model: twice
// DDP's whole gradient at 2 ranks for a model of one large unit.
// The bound (docs/fsdp.md, "Memory"): the shards' .grad, at most three units' flat gradients,
// and the blocks that wait (1/W of the model at most).
constexpr size_t kMaxReductionsInFlight = 2;

// What stands for a reduce-scatter over one rank: the average of one gradient is itself.
std::shared_ptr<Work> nothing_to_reduce() {
  auto done = std::make_shared<Work>("FSDP reduce-scatter over one rank (nothing to send)");
  done->mark_started();
  done->mark_done();
  return done;
}

}  // namespace

class FullyShardedDataParallel::Impl final : public UnitWatcher {
 public:
  Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group, FsdpOptions options)
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

  ~Impl() override {
    if (ddp_) return;
    unwatch_operators(this);
    // Issue 35: a gather over the broken group printed a warning before the real error.
    if (std::uncaught_exceptions() == 0) restore_whole_parameters();
  }

  // ---- construction

  // The splits are FSDP's first collectives: a rank that skipped the constructor is told so.
  void make_groups() {
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

  void check_and_broadcast(const std::vector<UnitPlan>& plans) {
    std::vector<std::string> entries;
    std::vector<torch::Tensor> tensors;
    for (const UnitPlan& plan : plans) {
      for (const UnitParameter& p : plan.parameters) {
        entries.push_back("unit '" + plan.name + "' " +
                          describe(p.tensor.requires_grad() ? "parameter" : "frozen parameter",
                                   p.name, p.tensor));
        tensors.push_back(p.tensor);
      }
    }
    for (const auto& b : module_->named_buffers())
      entries.push_back(describe("buffer", b.key(), b.value()));
    check_same_on_all_ranks(*group_, entries, "parameter/buffer", call_sites::kFsdpConstructor);
    broadcast_coalesced(*group_, tensors, 0, call_sites::kFsdpConstructor);
    broadcast_coalesced(*group_, buffers_, 0, call_sites::kFsdpConstructor);
  }

  void cut_units(std::vector<UnitPlan> plans) {
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

  bool is_root(size_t u) const { return units_[u]->name().empty(); }

  // ---- UnitWatcher (Note [FSDP interception]); never throws: errors wait in pending_error_

  int unit_of(const c10::StorageImpl* storage) const override {
    auto it = unit_by_storage_.find(storage);
    return it == unit_by_storage_.end() ? -1 : it->second;
  }

  void before_operator(const std::vector<int>& units) override {
    const bool grad = at::GradMode::is_enabled();
    if (iteration_.forward_order.empty() && root_ >= 0) gather_now({root_});
    for (int u : units) note_forward_use(u, grad);
    for (int u : units) {
      if (is_root(u)) continue;
      const int previous = iteration_.current_forward;
      if (previous >= 0 && previous != u && !contains(units, previous) &&
          frees_after_forward(grad)) {
        release(previous);
      }
      iteration_.current_forward = u;
    }
    gather_now(units);
    if (options_.forward_prefetch) {
      for (int u : units) prefetch_after(u, previous_forward_order_, iteration_.forward_order);
    }
  }

  void after_operator(const std::vector<int>& units, int64_t first, int64_t end) override {
    if (first < 0 || end <= first || !at::GradMode::is_enabled()) return;
    for (int64_t seq = first; seq < end; ++seq) {
      for (int u : units) iteration_.nodes.push_back({seq, u});
    }
    iteration_.nodes_sorted = false;
  }

  void before_backward_node(int64_t seq) override {
    const std::vector<int> units = units_of_node(seq);
    if (units.empty()) return;
    begin_backward();
    for (int u : units) {
      if (iteration_.backward_position[u] < 0) {
        iteration_.backward_position[u] = static_cast<int>(iteration_.backward_order.size());
        iteration_.backward_order.push_back(u);
      }
      if (is_root(u)) continue;
      const int previous = iteration_.current_backward;
      if (previous >= 0 && previous != u && !contains(units, previous) &&
          iteration_.backward_done[previous]) {
        release(previous);
      }
      iteration_.current_backward = u;
    }
    gather_now(units);
    if (options_.backward_prefetch) {
      for (int u : units) prefetch_after(u, previous_backward_order_, iteration_.backward_order);
    }
  }

  // ---- gathering

  static bool contains(const std::vector<int>& units, int u) {
    return std::find(units.begin(), units.end(), u) != units.end();
  }

  bool frees_after_forward(bool grad) const {
    if (full_parameters_scopes_ > 0) return false;
    return !grad || options_.strategy != ShardingStrategy::kShardGradOp;
  }

  void note_forward_use(int u, bool grad) {
    if (iteration_.forward_position[u] < 0) {
      iteration_.forward_position[u] = static_cast<int>(iteration_.forward_order.size());
      iteration_.forward_order.push_back(u);
    }
    if (!grad || iteration_.gradient_nodes[u] || units_[u]->trainable().empty()) return;
    std::vector<torch::Tensor> trainable;
    for (size_t p : units_[u]->trainable()) trainable.push_back(units_[u]->parameters()[p].tensor);
    iteration_.gradient_nodes[u] = autograd_compat::route_gradients(
        trainable,
        [this, u](std::vector<torch::Tensor>&& g) { on_unit_gradients(u, std::move(g)); });
  }

  // Gathers `units` (waiting for gathers in flight). On an error the units read zeros and the
  // error waits for the next call that can throw.
  void gather_now(const std::vector<int>& units) {
    for (int u : units) {
      try {
        if (units_[u]->state() == FlatUnit::State::kFreed) start_gather(u);
        if (units_[u]->state() == FlatUnit::State::kGathering) wait_for_gather(u);
      } catch (...) {
        keep_error(std::current_exception());
        units_[u]->fill_with_zeros();
      }
    }
  }

  void wait_for_gather(int u) {
    std::shared_ptr<Work> work = units_[u]->gather_work();
    wait_for(*work);
    units_[u]->wait_gathered();
    record(u, "all-gather", *work);
  }

  // Waits for `work` (rethrowing its error), counting the time in exposed_comm_ms when it had
  // not ended yet.
  void wait_for(const Work& work) {
    if (work.is_completed()) return work.wait();
    waiting([&] { work.wait(); });
  }

  template <typename Blocking>
  void waiting(Blocking&& blocking) {
    const auto start = Clock::now();
    blocking();
    iteration_.waited += Clock::now() - start;
  }

  void record(int u, const char* what, const Work& work) const {
    if (!options_.timeline) return;
    const std::string& name = units_[u]->name();
    options_.timeline->record({"unit " + (name.empty() ? std::string("(root)") : name) + " " + what,
                               "comm", "comm", work.started_at(), work.finished_at()});
  }

  // for_iteration: counted in the iteration's stats (not a gather of full_parameters() or of
  // the destructor).
  void start_gather(int u, bool for_iteration = true) {
    CollectiveOptions options;
    options.site = call_sites::kFsdpParameters;
    units_[u]->start_gather(*shard_group_, options);
    if (for_iteration) iteration_.allgather_bytes += units_[u]->gathered_bytes();
    note_gathered();
  }

  // Starts gathering the unit that followed u in the previous iteration's order, unless it has
  // been used in this one already (this order diverged) or is gathered.
  void prefetch_after(int u, const std::vector<int>& previous, const std::vector<int>& now) {
    auto at = std::find(previous.begin(), previous.end(), u);
    if (at == previous.end() || at + 1 == previous.end() || *(at + 1) < 0) return;
    const int next = *(at + 1);
    if (std::find(now.begin(), now.end(), next) != now.end()) return;
    if (units_[next]->state() != FlatUnit::State::kFreed) return;
    try {
      start_gather(next);
    } catch (...) {
      keep_error(std::current_exception());
    }
  }

  void release(int u) { units_[u]->release(); }

  void release_all() {
    for (auto& unit : units_) unit->release();
  }

  void note_gathered() {
    size_t gathered = 0;
    for (const auto& unit : units_) {
      if (unit->state() != FlatUnit::State::kFreed) gathered += unit->gathered_bytes();
    }
    peak_gathered_ = std::max(peak_gathered_, gathered);
  }

  // ---- backward

  std::vector<int> units_of_node(int64_t seq) {
    auto& nodes = iteration_.nodes;
    if (!iteration_.nodes_sorted) {
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      iteration_.nodes_sorted = true;
    }
    std::vector<int> units;
    auto it = std::lower_bound(nodes.begin(), nodes.end(), std::make_pair(seq, -1));
    for (; it != nodes.end() && it->first == seq; ++it) units.push_back(it->second);
    return units;
  }

  void begin_backward() {
    if (iteration_.end_queued) return;
    iteration_.end_queued = true;
    autograd_compat::queue_end_of_backward_callback([this] { end_of_backward(); });
  }

  // The unit's gradient node ran: every gradient this pass gives its parameters is here.
  void on_unit_gradients(int u, std::vector<torch::Tensor>&& gradients) {
    const UnwatchedScope own_work;
    begin_backward();
    raise_pending_error();
    FlatUnit& unit = *units_[u];
    auto& used = iteration_.used[u];
    used.resize(gradients.size(), 0);
    for (size_t i = 0; i < gradients.size(); ++i) used[i] |= gradients[i].defined() ? 1 : 0;
    torch::Tensor flat = unit.flatten_gradients(gradients, reduce_dtype(u));
    gradients.clear();
    torch::Tensor& local = accumulated_[u];
    if (local.defined()) {
      torch::NoGradGuard no_grad;
      flat.add_(local);
      local = torch::Tensor();
    }
    if (no_sync_) {
      local = flat;
    } else {
      iteration_.ready[u] = flat;
      iteration_.ready_at[u] = Clock::now();
      issue_ready_reductions();
      note_gradients();  // the most is held now, before finished inputs are released
      release_finished_inputs();
    }
    iteration_.backward_done[u] = 1;
    note_gradients();
    if (!is_root(u)) release(u);
  }

  torch::Dtype reduce_dtype(int u) const {
    const auto& mp = options_.mixed_precision;
    if (mp.reduce_dtype) return *mp.reduce_dtype;
    if (mp.param_dtype) return *mp.param_dtype;
    return units_[u]->shard_dtype();
  }

  // Starts the reduce-scatters of the ready units that are next in reduce_order_.
  void issue_ready_reductions() {
    while (iteration_.next_reduction < reduce_order_.size()) {
      const size_t u = reduce_order_[iteration_.next_reduction];
      if (!iteration_.ready[u].defined()) return;
      ReduceScatter rs;
      rs.input = std::move(iteration_.ready[u]);
      rs.input_bytes = rs.input.nbytes();
      rs.input_dtype = rs.input.scalar_type();
      const int64_t block = units_[u]->shard_numel();
      rs.block = rs.input.narrow(0, reduce_group_->rank() * block, block);
      rs.work = reduce_group_->size() == 1 ? nothing_to_reduce() : start_reduce_scatter(rs);
      rs.ready_at = iteration_.ready_at[u];
      iteration_.reductions[u] = std::move(rs);
      ++iteration_.next_reduction;
    }
  }

  std::shared_ptr<Work> start_reduce_scatter(const ReduceScatter& rs) {
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.site = call_sites::kFsdpGradients;
    options.stream = current_stream(rs.input);
    return reduce_group_->reduce_scatter_async(tensor_buffer(rs.input), tensor_buffer(rs.block),
                                               options);
  }

  // Note [FSDP gradients in flight].
  void release_finished_inputs() {
    size_t in_flight = 0;
    for (size_t i = iteration_.next_reduction; i-- > 0;) {
      const size_t u = reduce_order_[i];
      ReduceScatter& rs = iteration_.reductions[u];
      if (!rs.input.defined()) continue;
      if (in_flight == kMaxReductionsInFlight) wait_for(*rs.work);
      if (rs.work->is_completed()) {
        settle(u, rs);
      } else {
        ++in_flight;
      }
    }
  }

  // Note [FSDP gradients in flight]: the ended reduce-scatter's block lands in the shards'
  // .grad now if it can, else it is copied out of the flat gradient (unless it is all of it,
  // at one rank); the flat gradient is released.
  void settle(size_t u, ReduceScatter& rs) {
    rs.work->wait();  // ended: rethrows its error, if any
    if (lands_early(u)) {
      land_in_shards(u, rs.block, std::vector<char>(units_[u]->shard_parts().size(), 1), 0);
      rs.landed = true;
      rs.block = torch::Tensor();
    } else if (rs.block.numel() < rs.input.numel()) {
      rs.block = rs.block.clone();
    }
    rs.input = torch::Tensor();
  }

  // Whether unit u's block may land before the end of backward without the used map.
  bool lands_early(size_t u) const {
    if (replica_group_ && replica_group_->size() > 1) return false;
    for (const ShardPart& part : units_[u]->shard_parts()) {
      if (part.range.length > 0 && !part.tensor.grad().defined()) return false;
    }
    return true;
  }

  void end_of_backward() {
    const UnwatchedScope own_work;
    try {
      raise_pending_error();
      if (!no_sync_) finish_reductions();
      finish_iteration();
    } catch (...) {
      finish_iteration();
      throw;
    }
  }

  void finish_reductions() {
    for (size_t u : reduce_order_) {
      if (iteration_.reductions[u].work || iteration_.ready[u].defined()) continue;
      iteration_.ready_at[u] = Clock::now();
      // No backward reached this unit here (or only under no_sync): its part is zeros.
      torch::Tensor& local = accumulated_[u];
      iteration_.ready[u] =
          local.defined()
              ? local
              : units_[u]->flatten_gradients(
                    std::vector<torch::Tensor>(units_[u]->trainable().size()), reduce_dtype(u));
      local = torch::Tensor();
    }
    issue_ready_reductions();
    const std::vector<char> used = used_anywhere();
    std::vector<size_t> first_part(units_.size(), 0);
    for (size_t u = 1; u < units_.size(); ++u) {
      first_part[u] = first_part[u - 1] + units_[u - 1]->shard_parts().size();
    }
    IterationStats stats;
    for (size_t u : reduce_order_) {
      ReduceScatter& rs = iteration_.reductions[u];
      wait_for(*rs.work);
      stats.buckets.push_back(reduction_stats(u, rs));
      if (rs.input.defined()) settle(u, rs);
      if (!rs.landed) {
        if (replica_group_ && replica_group_->size() > 1) average_over_replicas(rs.block);
        land_in_shards(u, rs.block, used, first_part[u]);
      }
      note_gradients();
      rs = ReduceScatter();
    }
    if (options_.broadcast_buffers && !buffers_.empty() && group_->size() > 1) {
      waiting([&] { broadcast_coalesced(*group_, buffers_, 0, call_sites::kFsdpEndOfBackward); });
    }
    stats.exposed_comm_ms = std::chrono::duration<double, std::milli>(iteration_.waited).count();
    stats.allgather_bytes = iteration_.allgather_bytes;
    last_stats_ = std::move(stats);
  }

  BucketStats reduction_stats(size_t u, const ReduceScatter& rs) const {
    using Ms = std::chrono::duration<double, std::milli>;
    if (reduce_group_->size() > 1) record(static_cast<int>(u), "reduce-scatter", *rs.work);
    BucketStats stats;
    stats.bytes = rs.input_bytes;
    stats.reduced_dtype = rs.input_dtype;
    stats.reduced_bytes = rs.input_bytes;  // the reduce-scatter's input, in reduce_dtype
    stats.latency_ms = Ms(rs.work->finished_at() - rs.ready_at).count();
    stats.comm_ms = Ms(rs.work->finished_at() - rs.work->started_at()).count();
    return stats;
  }

  void average_over_replicas(torch::Tensor& block) {
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.site = call_sites::kFsdpGradients;
    waiting([&] { replica_group_->allreduce(tensor_buffer(block), options); });
  }

  // Whether any rank's backward gave each trainable parameter a gradient since the last
  // synchronization (the used maps of all units, in unit order, max-allreduced).
  std::vector<char> used_anywhere() {
    std::vector<uint8_t> mine;
    for (size_t u = 0; u < units_.size(); ++u) {
      const auto& used = iteration_.used[u];
      for (size_t i = 0; i < units_[u]->trainable().size(); ++i) {
        mine.push_back(i < used.size() ? used[i] : 0);
      }
      iteration_.used[u].clear();
    }
    auto map =
        torch::from_blob(mine.data(), {static_cast<int64_t>(mine.size())}, torch::kUInt8).clone();
    if (!mine.empty() && group_->size() > 1) {  // the max over one rank is its own map
      CollectiveOptions options;
      options.op = ReduceOp::kMax;
      options.site = call_sites::kFsdpEndOfBackward;
      waiting([&] { group_->allreduce(tensor_buffer(map), options); });
    }
    return std::vector<char>(map.data_ptr<uint8_t>(), map.data_ptr<uint8_t>() + map.numel());
  }

  // Note [ZeRO gradients]: the block's parts become (or are added to) the shards' .grad.
  void land_in_shards(size_t u, const torch::Tensor& block, const std::vector<char>& used,
                      size_t first) {
    torch::NoGradGuard no_grad;
    const auto& parts = units_[u]->shard_parts();
    // To host memory under offload (Note [FSDP CPU offload]); else a no-op but for the dtype.
    const torch::Tensor own = block.to(units_[u]->shard_device(), units_[u]->shard_dtype());
    for (size_t i = 0; i < parts.size(); ++i) {
      const ShardPart& part = parts[i];
      if (!used[first + i] || part.range.length == 0) continue;
      auto piece = autograd_compat::alias_range(own, part.range.block_offset, part.range.length);
      auto& grad = part.tensor.mutable_grad();
      if (grad.defined()) {
        grad.add_(piece);
      } else {
        grad = piece;
      }
    }
  }

  void finish_iteration() {
    release_all();
    for (size_t u = 0; u < units_.size(); ++u) {
      if (!iteration_.gradient_nodes[u]) continue;
      for (size_t p : units_[u]->trainable()) {
        autograd_compat::clear_gradient_route(units_[u]->parameters()[p].tensor);
      }
    }
    previous_forward_order_ = iteration_.forward_order;
    previous_backward_order_ = iteration_.backward_order;
    auto used = std::move(iteration_.used);
    iteration_ = Iteration(units_.size());
    if (no_sync_) iteration_.used = std::move(used);  // accumulates to the next synchronization
  }

  // ---- errors

  void keep_error(std::exception_ptr error) {
    if (!pending_error_) pending_error_ = error;
  }

  void raise_pending_error() {
    if (!pending_error_) return;
    auto error = pending_error_;
    pending_error_ = nullptr;
    std::rethrow_exception(error);
  }

  // ---- memory

  void note_gradients() { peak_gradients_ = std::max(peak_gradients_, gradient_bytes()); }

  // Each storage once: a .grad and a reduce-scatter's block may be views of another tensor.
  size_t gradient_bytes() const {
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

  FsdpMemoryReport memory(const torch::optim::Optimizer* optimizer) const {
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

  // ---- the rest of the API

  std::vector<torch::Tensor> shard_tensors() const {
    std::vector<torch::Tensor> tensors;
    for (const auto& item : named_shards()) tensors.push_back(item.value());
    return tensors;
  }

  // In the order of module->parameters() (the units' parameters are in that order, each unit
  // taking those of its own).
  torch::OrderedDict<std::string, torch::Tensor> named_shards() const {
    std::unordered_map<std::string, torch::Tensor> by_name;
    for (const auto& unit : units_) {
      for (const ShardPart& part : unit->shard_parts()) {
        by_name[unit->parameters()[part.parameter].name] = part.tensor;
      }
    }
    return in_module_order(by_name);
  }

  torch::OrderedDict<std::string, ShardSpan> shard_spans() const {
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

  // `by_name` in the order of module_->named_parameters(), each name once.
  template <typename Value>
  torch::OrderedDict<std::string, Value> in_module_order(
      const std::unordered_map<std::string, Value>& by_name) const {
    torch::OrderedDict<std::string, Value> ordered;
    for (const auto& item : module_->named_parameters()) {
      auto it = by_name.find(item.key());
      if (it != by_name.end() && !ordered.contains(item.key()))
        ordered.insert(item.key(), it->second);
    }
    return ordered;
  }

  void check_optimizer(const torch::optim::Optimizer& optimizer) const {
    check_sharded_optimizer(optimizer, "FullyShardedDataParallel", "fsdp", shard_group_->size(),
                            [this](const torch::Tensor& t) {
                              return shard_owner_.count(t.unsafeGetTensorImpl()) != 0;
                            });
  }

  void step(torch::optim::Optimizer& optimizer) {
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

  // Note [FSDP param dtype]: every unit gathers in its shards' dtype (full) or param_dtype.
  // Frees what is gathered in the other dtype first.
  void set_full_precision(bool full) {
    if (!options_.mixed_precision.param_dtype) return;
    release_all();
    for (auto& unit : units_) unit->set_full_precision(full);
  }

  void gather_all() {
    for (size_t u = 0; u < units_.size(); ++u) {
      if (units_[u]->state() == FlatUnit::State::kFreed) {
        start_gather(static_cast<int>(u), /*for_iteration=*/false);
      }
    }
    for (auto& unit : units_) unit->wait_gathered();
  }

  // After the shards were written behind the units' back (a checkpoint load): the units
  // gathered now are gathered again, every rank having the same ones gathered (gathers are
  // collective).
  void regather() {
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

  // The destructor's: every parameter gets memory of its own again, holding the trained values.
  void restore_whole_parameters() noexcept {
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

  // Per-iteration state: from the first use in a forward to the end of the backward.
  struct Iteration {
    Iteration() = default;
    explicit Iteration(size_t n)
        : forward_position(n, -1),
          backward_position(n, -1),
          gradient_nodes(n),
          backward_done(n, 0),
          used(n),
          ready(n),
          ready_at(n),
          reductions(n) {}
    std::vector<int> forward_order, forward_position;
    std::vector<int> backward_order, backward_position;
    int current_forward = -1;
    int current_backward = -1;
    std::vector<std::shared_ptr<autograd_compat::Node>> gradient_nodes;
    std::vector<std::pair<int64_t, int>> nodes;  // (sequence number, unit) of forward operators
    bool nodes_sorted = true;
    std::vector<char> backward_done;
    std::vector<std::vector<uint8_t>> used;  // per unit, per trainable parameter
    std::vector<torch::Tensor> ready;        // flat gradients waiting for their turn
    std::vector<Clock::time_point> ready_at;
    Clock::duration waited{};  // blocked on all-gathers and at the end of backward
    size_t allgather_bytes = 0;
    std::vector<ReduceScatter> reductions;
    size_t next_reduction = 0;
    bool end_queued = false;
  };

  std::shared_ptr<torch::nn::Module> module_;
  std::shared_ptr<Group> group_;
  FsdpOptions options_;
  std::optional<DistributedDataParallel> ddp_;  // kNoShard
  std::shared_ptr<Group> shard_group_, replica_group_, reduce_group_;
  std::vector<torch::Tensor> buffers_;
  std::vector<std::unique_ptr<FlatUnit>> units_;
  std::unordered_map<const c10::StorageImpl*, int> unit_by_storage_;
  std::unordered_map<const void*, size_t> shard_owner_;  // shard TensorImpl -> unit
  std::vector<size_t> reduce_order_;
  int root_ = -1;  // the root unit, if any parameter is outside every unit
  Iteration iteration_;
  std::vector<int> previous_forward_order_, previous_backward_order_;
  std::unordered_map<size_t, torch::Tensor> accumulated_;  // under no_sync, per unit
  bool no_sync_ = false;
  int full_parameters_scopes_ = 0;
  std::exception_ptr pending_error_;
  size_t peak_gathered_ = 0;
  const void* agreed_optimizer_ = nullptr;  // the optimizer every rank was found to share
  size_t peak_gradients_ = 0;
  IterationStats last_stats_;
};

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

}  // namespace detail

double clip_grad_norm(FullyShardedDataParallel& fsdp, double max_norm, double norm_type) {
  Group* group = shard_norm_group(fsdp);
  if (group == nullptr) {  // kNoShard: whole parameters
    return torch::nn::utils::clip_grad_norm_(fsdp.parameters(), max_norm, norm_type);
  }
  return clip_sharded_grad_norm(fsdp.parameters(), *group, max_norm, norm_type);
}

}  // namespace cohort
