// save_gathered_checkpoint (cohort/torch/checkpoint/sharded_checkpoint.h): every rank's shards and
// their optimizer state, sent to rank 0, which puts them together (shard_pieces.h's PieceCollector,
// as a load does) and writes one ordinary checkpoint file: the module's layout of
// torch::nn::Module::save with the whole values, and an optimizer of the same kind and param
// groups over them holding the whole state (checkpoint_state.h's encode_training_state).
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/sharded_common.h"
#include "cohort/core/check.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"

namespace cohort {
namespace {

using detail::concat;
using detail::kSave;
using detail::ManifestTensor;
using detail::OptimizerCodec;
using detail::RankHoldings;
using detail::shard_names;

// Writes the module as torch::nn::Module::save lays it out, with each parameter's and buffer's
// value taken from `values` (by full name).
void write_module(torch::serialize::OutputArchive& archive, const torch::nn::Module& module,
                  const std::string& prefix,
                  const std::unordered_map<std::string, torch::Tensor>& values) {
  auto value_of = [&](const std::string& key) {
    const auto it = values.find(prefix + key);
    COHORT_INTERNAL_ASSERT(it != values.end(), "the module's '", prefix, key,
                           "' is none of the tensors its wrapper describes (RankHoldings)");
    return it->second;
  };
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    archive.write(item.key(), value_of(item.key()));
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    archive.write(item.key(), value_of(item.key()), /*is_buffer=*/true);
  }
  for (const auto& child : module.named_children()) {
    if (!child.value()->is_serializable()) continue;
    torch::serialize::OutputArchive nested(archive.compilation_unit());
    write_module(nested, *child.value(), prefix + child.key() + ".", values);
    archive.write(child.key(), nested);
  }
}

// Rank 0: every tensor whole, from every rank's payload, and the file of them.
class GatheredFile {
 public:
  GatheredFile(const RankHoldings& holdings, std::vector<ManifestTensor> tensors,
               const TrainingState& state)
      : tensors_(std::move(tensors)) {
    std::unordered_map<std::string, bool> stepped;
    if (state.optimizer != nullptr) {
      const auto names = shard_names(holdings);
      for (const auto& group : state.optimizer->param_groups()) {
        for (const auto& tensor : group.params()) {
          stepped[names.at(tensor.unsafeGetTensorImpl())] = true;
        }
      }
    }
    std::vector<detail::PieceNeed> needs;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const ManifestTensor& t = tensors_[i];
      const auto dtype = i < holdings.shards.size()
                             ? holdings.shards[i].dtype
                             : holdings.unsharded[i - holdings.shards.size()].tensor.scalar_type();
      needs.push_back({i, 0, t.numel(), dtype, stepped.count(t.name) != 0});
    }
    pieces_ = std::make_unique<detail::PieceCollector>(tensors_, std::move(needs), -1);
  }

  detail::PieceCollector& pieces() { return *pieces_; }

  // The checkpoint file's payload, as save_checkpoint would write it for one process whose
  // model and optimizer hold what all the ranks held together.
  std::string encode(const std::string& path, const RankHoldings& holdings,
                     const TrainingState& state, const OptimizerCodec* codec, int world_size,
                     const std::vector<torch::Tensor>& rng_states) {
    pieces_->check_complete(path);
    std::unordered_map<std::string, torch::Tensor> values;
    auto& collected = pieces_->collected();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      values[tensors_[i].name] = collected[i].values.view(tensors_[i].shape);
    }
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    if (state.optimizer != nullptr) optimizer = full_optimizer(holdings, state, *codec, values);
    TrainingState full = state;
    full.optimizer = optimizer.get();
    return detail::encode_training_state(path, full, world_size, rng_states,
                                         detail::current_job_id(),
                                         [&](torch::serialize::OutputArchive& out) {
                                           write_module(out, *state.module, "", values);
                                         });
  }

 private:
  // An optimizer of the same kind and param groups over the whole values (stand-ins for the
  // parameters), holding the whole state.
  std::unique_ptr<torch::optim::Optimizer> full_optimizer(
      const RankHoldings& holdings, const TrainingState& state, const OptimizerCodec& codec,
      const std::unordered_map<std::string, torch::Tensor>& values) {
    const auto names = shard_names(holdings);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (const auto& group : state.optimizer->param_groups()) {
      std::vector<torch::Tensor> params;
      for (const auto& tensor : group.params()) {
        params.push_back(values.at(names.at(tensor.unsafeGetTensorImpl())));
      }
      groups.emplace_back(std::move(params), group.options().clone());
    }
    auto optimizer = codec.make_optimizer(std::move(groups), state.optimizer->defaults());
    auto& collected = pieces_->collected();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!collected[i].has_state) continue;
      const torch::Tensor& value = values.at(tensors_[i].name);
      for (auto& [name, field] : collected[i].state.fields) field = field.view(value.sizes());
      detail::set_state_of(*optimizer, value, codec.make_state(collected[i].state));
    }
    return optimizer;
  }

  std::vector<ManifestTensor> tensors_;
  std::unique_ptr<detail::PieceCollector> pieces_;
};

void save_gathered(const std::string& path, Group& group, const RankHoldings& holdings,
                   const TrainingState& state, const torch::nn::Module* expected_module) {
  const OptimizerCodec* codec = detail::agree_on_arguments(group, state, holdings, expected_module,
                                                           "save_gathered_checkpoint", kSave);
  const auto ranges = detail::saved_ranges(holdings, group.rank());
  const std::vector<int64_t> table = detail::gather_table(group, ranges, {});
  std::vector<torch::Tensor> rng_states;
  if (state.rng) rng_states = detail::gather_generator_states(path, group, kSave);
  int64_t status = detail::kStatusOk;
  std::string bytes;
  try {
    bytes = detail::encode_shard_payload(path, holdings, ranges, state.optimizer, codec, {});
  } catch (const std::exception& e) {
    status = detail::kStatusFailed;
    bytes = e.what();
  }
  if (group.rank() != 0) {
    detail::send_outcome(group, 0, status, bytes, kSave);
  } else {
    std::string message;
    GatheredFile file(holdings, detail::tensor_table(holdings, table, group.size()), state);
    for (int r = 0; r < group.size(); ++r) {
      if (r > 0) detail::recv_outcome(group, r, status, bytes, kSave);
      if (!message.empty()) continue;  // still receive from every rank
      if (status != detail::kStatusOk) {
        message = bytes;
        continue;
      }
      try {
        file.pieces().consume(r, concat(path, " (rank ", r, "'s part)"), bytes);
      } catch (const std::exception& e) {
        message = e.what();
      }
    }
    try {
      if (!message.empty()) throw CheckpointError(message);
      detail::write_checkpoint_file(
          path, file.encode(path, holdings, state, codec, group.size(), rng_states));
      status = detail::kStatusOk;
    } catch (const std::exception& e) {
      status = detail::kStatusFailed;
      message = e.what();
    }
    bytes = message;
  }
  detail::broadcast_outcome(group, status, bytes, /*root=*/0, kSave);
  if (status != detail::kStatusOk) throw CheckpointError(bytes);
}

}  // namespace

void save_gathered_checkpoint(const std::string& path, const ShardedParameters& sharded,
                              const TrainingState& state) {
  save_gathered(path, *sharded.group, sharded.holdings(), state, sharded.module);
}

}  // namespace cohort
