// What the sharded save and load (sharded_checkpoint.cc) and the gathered save
// (gathered_checkpoint.cc) share: the checks of their arguments, and the table of which range
// of which tensor each rank saves.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <string>
#include <unordered_map>
#include <vector>

#include "call_sites.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/shard_manifest.h"
#include "checkpoint/shard_pieces.h"
#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "rank_holdings.h"

namespace cohort::detail {

inline constexpr CallSite kSave = call_sites::kCheckpointSave;
inline constexpr CallSite kLoad = call_sites::kCheckpointLoad;

// `name` in `directory`.
std::string join(const std::string& directory, const std::string& name);

// The name of each shard tensor, by its TensorImpl (what an optimizer holds).
std::unordered_map<const void*, std::string> shard_names(const RankHoldings& holdings);

// Checks on every rank, then every rank throws the first failure: a module that is not
// `expected_module` (where not null), an optimizer of a kind no codec knows or holding a tensor
// that is not one of the holdings' shards (InvalidArgument, naming `caller`). Returns the
// optimizer's codec (null without one). Collective.
const OptimizerCodec* agree_on_arguments(Group& group, const TrainingState& state,
                                         const RankHoldings& holdings,
                                         const torch::nn::Module* expected_module,
                                         const char* caller, CallSite site);

// Every rank's `mine` (the same length on every rank), rank after rank.
template <typename T>
std::vector<T> allgather_rows(Group& group, const std::vector<T>& mine, CallSite site) {
  std::vector<T> all(mine.size() * static_cast<size_t>(group.size()));
  CollectiveOptions options;
  options.site = site;
  group.allgather(make_buffer(mine), make_buffer(all), options);
  return all;
}

// Every rank's saved ranges (and, for a sharded save, its file's size and CRC-32) on every
// rank: rank r's row is [bytes, crc, offset_0, length_0, offset_1, length_1, ...]. Collective.
std::vector<int64_t> gather_table(Group& group, const std::vector<SavedRange>& ranges,
                                  const ManifestFile& file);
// The manifest's tensors (holdings' shards, then unsharded tensors) with the pieces of `table`.
std::vector<ManifestTensor> tensor_table(const RankHoldings& holdings,
                                         const std::vector<int64_t>& table, int world_size);

// Runs fn() and returns what it threw (null: nothing).
template <typename Fn>
std::exception_ptr caught(Fn&& fn) {
  try {
    fn();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace cohort::detail
