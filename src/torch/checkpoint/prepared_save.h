// A save in two halves, so that the second can run on another thread (async_checkpoint.cc):
// prepare_*() takes from the training state, on the caller's thread, everything a save writes
// (Note [Archives of live tensors] in checkpoint_state.h: the parameters and optimizer state
// by reference, the rest as copies), and finish_*() writes it. The synchronous saves
// (checkpoint.cc, sharded_checkpoint.cc) run both halves in a row.
#pragma once

#include <torch/torch.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/read_tensor.h"
#include "checkpoint/shard_manifest.h"
#include "checkpoint/shard_pieces.h"
#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "rank_holdings.h"

namespace cohort::detail {

// checkpoint.h's one file. Only the writing rank (0) holds an archive.
struct PreparedFileSave {
  std::string path;
  std::unique_ptr<torch::serialize::OutputArchive> archive;  // null on ranks that write nothing
  std::vector<ReadTensor> reads;
  // The archive holds copies (Note [Snapshot saves]): nothing of the training state is read
  // after prepare_file_save returned, and `reads` is empty.
  bool staged = false;
  // What building the archive threw on the writing rank: finish reports it as a failed write,
  // so that every rank gets it (the others have already gone on to finish).
  std::exception_ptr error;
};

class TensorSnapshot;  // state_snapshot.h

// The checks of save_checkpoint, and the archive; collective over `group` when not null (the
// generator states are all-gathered). With `snapshot`, the archive is built over copies kept
// there when the state allows one within `snapshot_budget` bytes (PreparedFileSave::staged).
PreparedFileSave prepare_file_save(const std::string& path, Group* group,
                                   const TrainingState& state, TensorSnapshot* snapshot = nullptr,
                                   uint64_t snapshot_budget = 0);
// Rank 0 (or the one process) writes the file; with a group, every rank then gets its
// outcome (broadcast over `group`, at `site`) and throws its error.
void finish_file_save(PreparedFileSave& save, Group* group, const FileWriteHooks& hooks,
                      CallSite site);

// sharded_checkpoint.h's directory.
struct PreparedShardedSave {
  std::string directory;
  std::string token;
  RankHoldings holdings;
  const OptimizerCodec* codec = nullptr;
  std::vector<SavedRange> ranges;
  std::unique_ptr<torch::serialize::OutputArchive> archive;
  Manifest manifest;  // all but its tensors and files, which finish_sharded_save adds
  // The shards this rank's archive reads after prepare_sharded_save returned; staged, it holds
  // copies of them instead (Note [Snapshot saves]) and reads nothing of the training state.
  std::vector<ReadTensor> reads;
  bool staged = false;
  std::exception_ptr error;  // building this rank's archive or manifest: reported by finish
};

// The ranks agree on the arguments and on the save's token; collective over `group`. With
// `snapshot`, this rank's archive is built over copies kept there when they take at most
// `snapshot_budget` bytes and the state has no parts (PreparedShardedSave::staged).
PreparedShardedSave prepare_sharded_save(const std::string& directory, Group& group,
                                         RankHoldings holdings, const TrainingState& state,
                                         const torch::nn::Module* expected_module,
                                         TensorSnapshot* snapshot = nullptr,
                                         uint64_t snapshot_budget = 0);
// Steps 3-5 of Note [Sharded save] (sharded_checkpoint.cc), collective over `group`: every rank
// writes its file, rank 0 the manifest; every rank throws the same error.
void finish_sharded_save(PreparedShardedSave& save, Group& group, const FileWriteHooks& hooks,
                         CallSite site);

}  // namespace cohort::detail
