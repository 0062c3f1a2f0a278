#include "checkpoint/sharded_common.h"

#include <algorithm>
#include <sstream>

#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/checkpoint_state.h"
#include "cohort/core/check.h"

namespace cohort::detail {
namespace {

// The codec of state.optimizer (null without one). Throws InvalidArgument for an optimizer of
// a kind not known or holding a tensor that is not one of the holdings' shards.
const OptimizerCodec* check_arguments(const TrainingState& state, const RankHoldings& holdings,
                                      const torch::nn::Module* expected_module,
                                      const char* caller) {
  check_training_state(state, caller);
  COHORT_CHECK(state.parts.empty(), caller,
               ": TrainingState::parts are kept by save_checkpoint's one file only, not by a "
               "sharded checkpoint; save them with save_checkpoint, or leave them out");
  COHORT_CHECK(expected_module == nullptr || state.module == expected_module, caller,
               ": TrainingState::module is not the wrapper's module; point it at "
               "&zero.module() or &fsdp.module()");
  if (state.optimizer == nullptr) return nullptr;
  const OptimizerCodec* codec = codec_of(*state.optimizer);
  COHORT_CHECK(codec != nullptr, caller,
               ": the optimizer is none of the kinds whose state a sharded checkpoint can cut "
               "into ranges (",
               known_optimizers(),
               "); save the model without it (TrainingState::optimizer = nullptr)");
  const auto names = shard_names(holdings);
  const auto& groups = state.optimizer->param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].params().size(); ++i) {
      const torch::Tensor& tensor = groups[g].params()[i];
      std::ostringstream shape;
      shape << tensor.sizes();
      COHORT_CHECK(names.count(tensor.unsafeGetTensorImpl()) != 0, caller,
                   ": the optimizer's param group ", g, " holds, at ", i, ", a tensor of shape ",
                   shape.str(),
                   " that is not one the wrapper gives the optimizer: build it over "
                   "zero.parameters() (or zero.named_parameters()) under ZeroDataParallel, "
                   "fsdp.parameters() under FullyShardedDataParallel, over the module's "
                   "parameters under DistributedDataParallel or in one process");
    }
  }
  return codec;
}

}  // namespace

std::string join(const std::string& directory, const std::string& name) {
  return !directory.empty() && directory.back() == '/' ? directory + name : directory + "/" + name;
}

// The name of each shard tensor, by its TensorImpl (what an optimizer holds).
std::unordered_map<const void*, std::string> shard_names(const RankHoldings& holdings) {
  std::unordered_map<const void*, std::string> names;
  for (const ParameterShard& shard : holdings.shards) {
    names[shard.tensor.unsafeGetTensorImpl()] = shard.name;
  }
  return names;
}

const OptimizerCodec* agree_on_arguments(Group& group, const TrainingState& state,
                                         const RankHoldings& holdings,
                                         const torch::nn::Module* expected_module,
                                         const char* caller, CallSite site) {
  const OptimizerCodec* codec = nullptr;
  std::exception_ptr error;
  try {
    codec = check_arguments(state, holdings, expected_module, caller);
  } catch (...) {
    error = std::current_exception();
  }
  rethrow_on_every_rank(group, error, site);
  return codec;
}

std::vector<int64_t> gather_table(Group& group, const std::vector<SavedRange>& ranges,
                                  const ManifestFile& file) {
  std::vector<int64_t> mine = {static_cast<int64_t>(file.bytes), file.crc32};
  for (const SavedRange& range : ranges) {
    mine.push_back(range.offset);
    mine.push_back(range.length);
  }
  return allgather_rows(group, mine, kSave);
}

std::vector<ManifestTensor> tensor_table(const RankHoldings& holdings,
                                         const std::vector<int64_t>& table, int world_size) {
  std::vector<ManifestTensor> tensors;
  for (const ParameterShard& shard : holdings.shards) {
    tensors.push_back({shard.name, false, shard.shape, c10::toString(shard.dtype), {}});
  }
  for (const UnshardedTensor& t : holdings.unsharded) {
    tensors.push_back(
        {t.name, t.buffer, t.tensor.sizes().vec(), c10::toString(t.tensor.scalar_type()), {}});
  }
  const size_t row = table.size() / static_cast<size_t>(world_size);
  for (int r = 0; r < world_size; ++r) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t offset = table[r * row + 2 + 2 * i];
      const int64_t length = table[r * row + 3 + 2 * i];
      if (length > 0) tensors[i].pieces.push_back({r, offset, length});
    }
  }
  for (ManifestTensor& t : tensors) {
    std::sort(t.pieces.begin(), t.pieces.end(),
              [](const auto& a, const auto& b) { return a.offset < b.offset; });
  }
  return tensors;
}

}  // namespace cohort::detail
