// detail::TensorSnapshot and the optimizer's swapped state (state_snapshot.h; Note [Snapshot
// saves]).
#include "checkpoint/state_snapshot.h"

#include <cstring>
#include <utility>

#include "checkpoint/optimizer_codec.h"

namespace cohort::detail {
namespace {

uint64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(t.numel()) * t.element_size() : 0;
}

}  // namespace

torch::Tensor TensorSnapshot::copy(const std::string& key, const torch::Tensor& live) {
  if (!live.defined()) return live;
  torch::NoGradGuard no_grad;
  torch::Tensor& kept = kept_[key];
  if (!kept.defined() || kept.sizes() != live.sizes() || kept.dtype() != live.dtype() ||
      kept.device() != live.device()) {
    kept = torch::empty_like(live, torch::MemoryFormat::Contiguous);
  }
  if (live.is_cuda()) {
    kept.copy_(live);
  } else {
    pending_.add(key, kept, live);
  }
  return kept;
}

PendingCopies TensorSnapshot::take_pending() {
  return std::exchange(pending_, PendingCopies());
}

void PendingCopies::add(std::string name, torch::Tensor kept, torch::Tensor live) {
  const auto version = static_cast<int64_t>(live._version());
  live_.push_back({std::move(name), std::move(live), version});
  kept_.push_back(std::move(kept));
}

void PendingCopies::fill(const std::string& what) const {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < live_.size(); ++i) {
    const torch::Tensor& live = live_[i].tensor;
    if (live.is_contiguous()) {
      std::memcpy(kept_[i].data_ptr(), live.data_ptr(), live.nbytes());
    } else {
      kept_[i].copy_(live);
    }
  }
  check_unchanged(what, live_);
}

uint64_t TensorSnapshot::held_bytes() const {
  uint64_t total = 0;
  for (const auto& [key, tensor] : kept_) total += bytes_of(tensor);
  return total;
}

std::optional<uint64_t> snapshot_bytes(const TrainingState& state) {
  if (!state.parts.empty()) return std::nullopt;
  uint64_t total = 0;
  for (const auto& p : state.module->parameters()) total += bytes_of(p);
  if (state.optimizer == nullptr) return total;
  const OptimizerCodec* codec = codec_of(*state.optimizer);
  if (codec == nullptr) return std::nullopt;
  for (const auto& group : state.optimizer->param_groups()) {
    for (const auto& p : group.params()) {
      const auto* param_state = state_of(*state.optimizer, p);
      if (param_state == nullptr) continue;
      for (const auto& [name, tensor] : codec->read_state(*param_state).fields) {
        total += bytes_of(tensor);
      }
    }
  }
  return total;
}

OptimizerStateCopies::OptimizerStateCopies(torch::optim::Optimizer& optimizer,
                                           TensorSnapshot& snapshot)
    : optimizer_(optimizer) {
  const OptimizerCodec* codec = codec_of(optimizer);
  size_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const std::string key = "optimizer/" + std::to_string(index++) + "/";
      const auto* param_state = state_of(optimizer, p);
      if (param_state == nullptr) continue;
      FlatState flat = codec->read_state(*param_state);
      for (auto& [name, tensor] : flat.fields) tensor = snapshot.copy(key + name, tensor);
      auto copy = codec->make_state(flat);
      originals_.emplace_back(p, swap_state_of(optimizer, p, std::move(copy)));
    }
  }
}

OptimizerStateCopies::~OptimizerStateCopies() {
  for (auto& [tensor, original] : originals_) {
    swap_state_of(optimizer_, tensor, std::move(original));
  }
}

}  // namespace cohort::detail
