// FullyShardedDataParallel::Impl: the operator interception (Note [FSDP interception] in
// shard/fsdp_impl.h) and the all-gathers it starts, with their prefetch.

#include <algorithm>
#include <exception>
#include <optional>
#include <unordered_map>

#include "autograd_compat.h"
#include "call_sites.h"
#include "operator_observer.h"
#include "shard/flat_unit.h"
#include "shard/fsdp_impl.h"

namespace cohort {

int FullyShardedDataParallel::Impl::unit_of(const c10::StorageImpl* storage) const {
  auto it = unit_by_storage_.find(storage);
  return it == unit_by_storage_.end() ? -1 : it->second;
}

void FullyShardedDataParallel::Impl::before_operator(const std::vector<int>& units) {
  const bool grad = at::GradMode::is_enabled();
  if (iteration_.forward_order.empty() && root_ >= 0) gather_now({root_});
  for (int u : units) note_forward_use(u, grad);
  for (int u : units) {
    if (is_root(u)) continue;
    const int previous = iteration_.current_forward;
    if (previous >= 0 && previous != u && !contains(units, previous) && frees_after_forward(grad)) {
      release(previous);
    }
    iteration_.current_forward = u;
  }
  gather_now(units);
  if (options_.forward_prefetch) {
    for (int u : units) prefetch_after(u, previous_forward_order_, iteration_.forward_order);
  }
}

void FullyShardedDataParallel::Impl::after_operator(const std::vector<int>& units, int64_t first,
                                                    int64_t end) {
  if (first < 0 || end <= first || !at::GradMode::is_enabled()) return;
  for (int64_t seq = first; seq < end; ++seq) {
    for (int u : units) iteration_.nodes.push_back({seq, u});
  }
  iteration_.nodes_sorted = false;
}

void FullyShardedDataParallel::Impl::before_backward_node(int64_t seq) {
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

bool FullyShardedDataParallel::Impl::contains(const std::vector<int>& units, int u) {
  return std::find(units.begin(), units.end(), u) != units.end();
}

bool FullyShardedDataParallel::Impl::frees_after_forward(bool grad) const {
  if (full_parameters_scopes_ > 0) return false;
  return !grad || options_.strategy != ShardingStrategy::kShardGradOp;
}

void FullyShardedDataParallel::Impl::note_forward_use(int u, bool grad) {
  if (iteration_.forward_position[u] < 0) {
    iteration_.forward_position[u] = static_cast<int>(iteration_.forward_order.size());
    iteration_.forward_order.push_back(u);
  }
  if (!grad || iteration_.gradient_nodes[u] || units_[u]->trainable().empty()) return;
  std::vector<torch::Tensor> trainable;
  for (size_t p : units_[u]->trainable()) trainable.push_back(units_[u]->parameters()[p].tensor);
  iteration_.gradient_nodes[u] = autograd_compat::route_gradients(
      trainable, [this, u](std::vector<torch::Tensor>&& g) { on_unit_gradients(u, std::move(g)); });
}

void FullyShardedDataParallel::Impl::gather_now(const std::vector<int>& units) {
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

void FullyShardedDataParallel::Impl::wait_for_gather(int u) {
  std::shared_ptr<Work> work = units_[u]->gather_work();
  wait_for(*work);
  units_[u]->wait_gathered();
  record(u, "all-gather", *work);
}

void FullyShardedDataParallel::Impl::wait_for(const Work& work) {
  if (work.is_completed()) return work.wait();
  waiting([&] { work.wait(); });
}

void FullyShardedDataParallel::Impl::record(int u, const char* what, const Work& work) const {
  if (!options_.timeline) return;
  const std::string& name = units_[u]->name();
  options_.timeline->record({"unit " + (name.empty() ? std::string("(root)") : name) + " " + what,
                             "comm", "comm", work.started_at(), work.finished_at()});
}

void FullyShardedDataParallel::Impl::start_gather(int u, bool for_iteration) {
  CollectiveOptions options;
  options.site = call_sites::kFsdpParameters;
  units_[u]->start_gather(*shard_group_, options);
  if (for_iteration) iteration_.allgather_bytes += units_[u]->gathered_bytes();
  note_gathered();
}

void FullyShardedDataParallel::Impl::prefetch_after(int u, const std::vector<int>& previous,
                                                    const std::vector<int>& now) {
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

void FullyShardedDataParallel::Impl::release_all() {
  for (auto& unit : units_) unit->release();
}

void FullyShardedDataParallel::Impl::note_gathered() {
  size_t gathered = 0;
  for (const auto& unit : units_) {
    if (unit->state() != FlatUnit::State::kFreed) gathered += unit->gathered_bytes();
  }
  peak_gathered_ = std::max(peak_gathered_, gathered);
}

}  // namespace cohort
