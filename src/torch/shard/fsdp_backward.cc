// FullyShardedDataParallel::Impl: the gradients, from each unit's gradient node to the blocks
// in the shards' .grad (Note [FSDP gradients in flight]).

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "autograd_compat.h"
#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/torch/tensor_buffer.h"
#include "operator_observer.h"
#include "shard/flat_unit.h"
#include "shard/fsdp_impl.h"

namespace cohort {
namespace {

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

std::vector<int> FullyShardedDataParallel::Impl::units_of_node(int64_t seq) {
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

void FullyShardedDataParallel::Impl::begin_backward() {
  if (iteration_.end_queued) return;
  iteration_.end_queued = true;
  autograd_compat::queue_end_of_backward_callback([this] { end_of_backward(); });
}

void FullyShardedDataParallel::Impl::on_unit_gradients(int u,
                                                       std::vector<torch::Tensor>&& gradients) {
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

torch::Dtype FullyShardedDataParallel::Impl::reduce_dtype(int u) const {
  const auto& mp = options_.mixed_precision;
  if (mp.reduce_dtype) return *mp.reduce_dtype;
  if (mp.param_dtype) return *mp.param_dtype;
  return units_[u]->shard_dtype();
}

void FullyShardedDataParallel::Impl::issue_ready_reductions() {
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

std::shared_ptr<Work> FullyShardedDataParallel::Impl::start_reduce_scatter(
    const ReduceScatter& rs) {
  CollectiveOptions options;
  options.op = ReduceOp::kAvg;
  options.site = call_sites::kFsdpGradients;
  options.stream = current_stream(rs.input);
  return reduce_group_->reduce_scatter_async(tensor_buffer(rs.input), tensor_buffer(rs.block),
                                             options);
}

void FullyShardedDataParallel::Impl::release_finished_inputs() {
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

void FullyShardedDataParallel::Impl::settle(size_t u, ReduceScatter& rs) {
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

bool FullyShardedDataParallel::Impl::lands_early(size_t u) const {
  if (replica_group_ && replica_group_->size() > 1) return false;
  for (const ShardPart& part : units_[u]->shard_parts()) {
    if (part.range.length > 0 && !part.tensor.grad().defined()) return false;
  }
  return true;
}

void FullyShardedDataParallel::Impl::end_of_backward() {
  const UnwatchedScope own_work;
  try {
    raise_pending_error();
    if (!no_sync_) finish_reductions();
    finish_iteration();
  } catch (...) {
    abort_in_flight(std::current_exception());
    finish_iteration();
    throw;
  }
}

void FullyShardedDataParallel::Impl::abort_in_flight(std::exception_ptr cause) noexcept {
  for (const auto& subgroup : {reduce_group_, shard_group_, replica_group_}) {
    if (cause && subgroup && subgroup != group_) subgroup->abort(cause);
  }
  for (ReduceScatter& rs : iteration_.reductions) {
    if (!rs.work) continue;
    try {
      rs.work->wait();
    } catch (...) {  // the error that ended the iteration is the one to report
    }
  }
}

void FullyShardedDataParallel::Impl::finish_reductions() {
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

BucketStats FullyShardedDataParallel::Impl::reduction_stats(size_t u,
                                                            const ReduceScatter& rs) const {
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

void FullyShardedDataParallel::Impl::average_over_replicas(torch::Tensor& block) {
  CollectiveOptions options;
  options.op = ReduceOp::kAvg;
  options.site = call_sites::kFsdpGradients;
  waiting([&] { replica_group_->allreduce(tensor_buffer(block), options); });
}

std::vector<char> FullyShardedDataParallel::Impl::used_anywhere() {
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

void FullyShardedDataParallel::Impl::land_in_shards(size_t u, const torch::Tensor& block,
                                                    const std::vector<char>& used, size_t first) {
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

void FullyShardedDataParallel::Impl::finish_iteration() {
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

}  // namespace cohort
