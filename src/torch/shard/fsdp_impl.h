// FullyShardedDataParallel's machinery (include/cohort/torch/shard/fsdp.h is the API, fsdp.cc
// its forwarding). The Impl's work is in three files: fsdp_impl.cc (construction, errors,
// memory, step and the rest of the API), fsdp_gather.cc (the operator interception and the
// all-gathers of the forward) and fsdp_backward.cc (the gradients' reduce-scatters).
//
// Note [FSDP interception]
// libtorch has no forward or backward hooks on modules, and the bar is that neither the model
// class nor its forward() changes. So cohort intercepts operators, not modules: a
// RecordFunction observer (operator_observer.h) sees, before every operator on the
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
#pragma once

#include <optional>
#include <unordered_map>
#include <vector>

#include "autograd_compat.h"
#include "cohort/torch/shard/fsdp.h"
#include "operator_observer.h"
#include "shard/flat_unit.h"
#include "shard/unit_plan.h"

namespace cohort {

class FullyShardedDataParallel::Impl final : public UnitWatcher {
 public:
  // One unit's reduce-scatter of its gradients (Note [FSDP gradients in flight] in
  // fsdp_backward.cc).
  struct ReduceScatter {
    torch::Tensor input;  // the unit's flat gradient, reduced in place; released once it has ended
    torch::Tensor block;  // this rank's block: a view of input, else a copy waiting to land
    bool landed = false;  // the block is in the shards' .grad already
    size_t input_bytes = 0;
    torch::ScalarType input_dtype = torch::kFloat32;  // what went on the wire
    std::shared_ptr<Work> work;
    Clock::time_point ready_at;  // when the unit's gradients were all there
  };

  Impl(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<Group> group,
       FsdpOptions options);

  ~Impl() override;

  // ---- construction

  // The splits are FSDP's first collectives: a rank that skipped the constructor is told so.
  void make_groups();

  void check_and_broadcast(const std::vector<UnitPlan>& plans);

  void cut_units(std::vector<UnitPlan> plans);

  bool is_root(size_t u) const { return units_[u]->name().empty(); }

  // ---- UnitWatcher (Note [FSDP interception]); never throws: errors wait in pending_error_

  int unit_of(const c10::StorageImpl* storage) const override;

  void before_operator(const std::vector<int>& units) override;

  void after_operator(const std::vector<int>& units, int64_t first, int64_t end) override;

  void before_backward_node(int64_t seq) override;

  // ---- gathering

  static bool contains(const std::vector<int>& units, int u);

  bool frees_after_forward(bool grad) const;

  void note_forward_use(int u, bool grad);

  // Gathers `units` (waiting for gathers in flight). On an error the units read zeros and the
  // error waits for the next call that can throw.
  void gather_now(const std::vector<int>& units);

  void wait_for_gather(int u);

  // Waits for `work` (rethrowing its error), counting the time in exposed_comm_ms when it had
  // not ended yet.
  void wait_for(const Work& work);

  template <typename Blocking>
  void waiting(Blocking&& blocking) {
    const auto start = Clock::now();
    blocking();
    iteration_.waited += Clock::now() - start;
  }

  void record(int u, const char* what, const Work& work) const;

  // for_iteration: counted in the iteration's stats (not a gather of full_parameters() or of
  // the destructor).
  void start_gather(int u, bool for_iteration = true);

  // Starts gathering the unit that followed u in the previous iteration's order, unless it has
  // been used in this one already (this order diverged) or is gathered.
  void prefetch_after(int u, const std::vector<int>& previous, const std::vector<int>& now);

  void release(int u) { units_[u]->release(); }

  void release_all();

  void note_gathered();

  // ---- backward

  std::vector<int> units_of_node(int64_t seq);

  void begin_backward();

  // The unit's gradient node ran: every gradient this pass gives its parameters is here.
  void on_unit_gradients(int u, std::vector<torch::Tensor>&& gradients);

  torch::Dtype reduce_dtype(int u) const;

  // Starts the reduce-scatters of the ready units that are next in reduce_order_.
  void issue_ready_reductions();

  std::shared_ptr<Work> start_reduce_scatter(const ReduceScatter& rs);

  // Note [FSDP gradients in flight].
  void release_finished_inputs();

  // Note [FSDP gradients in flight]: the ended reduce-scatter's block lands in the shards'
  // .grad now if it can, else it is copied out of the flat gradient (unless it is all of it,
  // at one rank); the flat gradient is released.
  void settle(size_t u, ReduceScatter& rs);

  // Whether unit u's block may land before the end of backward without the used map.
  bool lands_early(size_t u) const;

  void end_of_backward();

  void finish_reductions();

  BucketStats reduction_stats(size_t u, const ReduceScatter& rs) const;

  void average_over_replicas(torch::Tensor& block);

  // Whether any rank's backward gave each trainable parameter a gradient since the last
  // synchronization (the used maps of all units, in unit order, max-allreduced).
  std::vector<char> used_anywhere();

  // Note [ZeRO gradients]: the block's parts become (or are added to) the shards' .grad.
  void land_in_shards(size_t u, const torch::Tensor& block, const std::vector<char>& used,
                      size_t first);

  void finish_iteration();

  // ---- errors

  // A failed iteration can leave collectives in flight on the subgroups, which may be healthy
  // (a node's reduce-scatters under HYBRID_SHARD when a rank of another node died): they are
  // aborted, so that waiting for them ends at once and the peers fail with the same error
  // instead of waiting for this rank until their deadline; then waited for, so that no
  // collective writes into memory that the iteration frees.
  // `cause`: the failure (null: only waits).
  void abort_in_flight(std::exception_ptr cause) noexcept;

  void keep_error(std::exception_ptr error);

  void raise_pending_error();

  // ---- memory

  void note_gradients() { peak_gradients_ = std::max(peak_gradients_, gradient_bytes()); }

  // Each storage once: a .grad and a reduce-scatter's block may be views of another tensor.
  size_t gradient_bytes() const;

  FsdpMemoryReport memory(const torch::optim::Optimizer* optimizer) const;

  // ---- the rest of the API

  std::vector<torch::Tensor> shard_tensors() const;

  // In the order of module->parameters() (the units' parameters are in that order, each unit
  // taking those of its own).
  torch::OrderedDict<std::string, torch::Tensor> named_shards() const;

  torch::OrderedDict<std::string, ShardSpan> shard_spans() const;

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

  void check_optimizer(const torch::optim::Optimizer& optimizer) const;

  void step(torch::optim::Optimizer& optimizer);

  // Note [FSDP param dtype]: every unit gathers in its shards' dtype (full) or param_dtype.
  // Frees what is gathered in the other dtype first.
  void set_full_precision(bool full);

  void gather_all();

  // After the shards were written behind the units' back (a checkpoint load): the units
  // gathered now are gathered again, every rank having the same ones gathered (gathers are
  // collective).
  void regather();

  // The destructor's: every parameter gets memory of its own again, holding the trained values.
  void restore_whole_parameters() noexcept;
  // Leaves the parameters whole, in memory of their own holding zeros, without gathering
  // (FsdpAccess::abandon); the destructor then gathers nothing.
  void abandon(std::exception_ptr cause);
  bool abandoned_ = false;

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

}  // namespace cohort
