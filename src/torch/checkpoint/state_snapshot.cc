// detail::TensorSnapshot and the optimizer's swapped state (state_snapshot.h; Note [Snapshot
// saves]).
#include "checkpoint/state_snapshot.h"

#include <cstring>
#include <utility>

#include "checkpoint/optimizer_codec.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"

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
  copies_.push_back({std::move(name), std::move(kept), std::move(live), version});
}

void PendingCopies::fill(const std::string& what) const {
  torch::NoGradGuard no_grad;
  for (const Copy& c : copies_) {
    if (c.live.is_contiguous()) {
      std::memcpy(c.kept.data_ptr(), c.live.data_ptr(), c.live.nbytes());
    } else {
      c.kept.copy_(c.live);
    }
  }
  for (const Copy& c : copies_) {
    if (static_cast<int64_t>(c.live._version()) == c.version) continue;
    throw CheckpointError(concat(
        "asynchronous checkpoint '", what, "' was abandoned: '", c.name,
        "' was changed before the save had copied it, so the file would have mixed two steps. "
        "Call AsyncCheckpointer::before_update() before optimizer.step() (and before anything "
        "else that changes the parameters or the optimizer's state); the previous checkpoint "
        "at that path is unchanged"));
  }
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
