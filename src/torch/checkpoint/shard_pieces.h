// The pieces of a sharded checkpoint: what one rank's file holds (encode_shard_payload), and
// putting the pieces that several files hold back together as the ranges another rank needs
// (PieceCollector). Note [Re-sliced state] in optimizer_codec.h says why ranges of the
// optimizer state can be cut and joined like ranges of the parameters.
//
// A shard file's payload is a torch archive (framed by checkpoint_file.h's footer):
//   tensor/<i>/value   1-D: the saved range of manifest tensor i (only for non-empty ranges)
//   state/<i>          nested: the optimizer's state for that range, where it keeps any:
//                      step (int64) and each state tensor, 1-D, by name (exp_avg, ...)
//   rng                uint8: the saving rank's generator state (when TrainingState::rng)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/optimizer_codec.h"
#include "checkpoint/shard_manifest.h"
#include "rank_holdings.h"

namespace cohort::detail {

class TensorSnapshot;  // state_snapshot.h

struct SavedRange {
  int64_t offset = 0;
  int64_t length = 0;
};

// What this rank saves of each tensor of `holdings` (shards, then unsharded tensors): its shard,
// or of a shard held by R replicas its 1/R part; of an unsharded tensor all of it on rank 0,
// nothing elsewhere. Together the ranks' ranges cover each tensor once.
std::vector<SavedRange> saved_ranges(const RankHoldings& holdings, int rank);

// This rank's file payload: `ranges` of every tensor of `holdings` (tensor i of the manifest is
// the i-th of holdings), the optimizer's state for them (optimizer and codec may be null) and
// `rng` (may be undefined). The archive holds the shards' and the optimizer state's ranges
// over their own memory, not copies (Note [Archives of live tensors] in checkpoint_state.h), or
// with `snapshot` copies of them kept there (Note [Snapshot saves] in state_snapshot.h), and
// copies of the unsharded tensors (buffers). Throws CheckpointError naming `path` when torch
// cannot describe it.
std::unique_ptr<torch::serialize::OutputArchive> shard_archive(
    const std::string& path, const RankHoldings& holdings, const std::vector<SavedRange>& ranges,
    const torch::optim::Optimizer* optimizer, const OptimizerCodec* codec, const torch::Tensor& rng,
    TensorSnapshot* snapshot = nullptr);

// The bytes shard_archive copies into a snapshot: the shards' ranges and their optimizer state.
uint64_t shard_snapshot_bytes(const RankHoldings& holdings, const std::vector<SavedRange>& ranges,
                              const torch::optim::Optimizer* optimizer,
                              const OptimizerCodec* codec);

// The bytes of shard_archive(...).
std::string encode_shard_payload(const std::string& path, const RankHoldings& holdings,
                                 const std::vector<SavedRange>& ranges,
                                 const torch::optim::Optimizer* optimizer,
                                 const OptimizerCodec* codec, const torch::Tensor& rng);

// A range this rank needs of manifest tensor `tensor`; `state`: also its optimizer state.
struct PieceNeed {
  size_t tensor = 0;
  int64_t offset = 0;
  int64_t length = 0;
  torch::ScalarType dtype = torch::kFloat;  // the model's (and the manifest's: match_tensors)
  bool state = false;
};

// What was collected for a need: values (1-D, the need's dtype), and the state where the saved
// run had one for those elements (fields 1-D too).
struct Collected {
  torch::Tensor values;
  bool has_state = false;
  FlatState state;
};

class PieceCollector {
 public:
  // rng_rank: the saved rank whose generator state is wanted, or -1.
  PieceCollector(const std::vector<ManifestTensor>& tensors, std::vector<PieceNeed> needs,
                 int rng_rank);

  // Whether saved rank r's file holds something needed (by r).
  std::vector<uint8_t> files_needed(int world_size) const;
  // Takes what is needed from saved rank `rank`'s payload; `file` names it in errors
  // (CheckpointError: not a shard file, a piece missing or of the wrong dtype or length, state
  // saved for some elements of a range and not for others).
  void consume(int rank, const std::string& file, const std::string& payload);
  // Throws CheckpointError naming `checkpoint` unless every need was covered.
  void check_complete(const std::string& checkpoint) const;

  const std::vector<PieceNeed>& needs() const { return needs_; }
  std::vector<Collected>& collected() { return collected_; }
  const torch::Tensor& rng() const { return rng_; }

 private:
  struct Progress {
    int64_t values = 0;   // elements copied
    int state_seen = -1;  // -1: no piece yet, 0: pieces without state, 1: pieces with state
    std::map<std::string, int64_t> fields;  // elements copied per state tensor
  };
  void take_piece(size_t need, const ManifestPiece& piece, const std::string& file,
                  torch::serialize::InputArchive& archive);
  void take_state(size_t need, const ManifestPiece& piece, const std::string& file,
                  torch::serialize::InputArchive& archive, int64_t begin, int64_t length);

  const std::vector<ManifestTensor>& tensors_;
  std::vector<PieceNeed> needs_;
  int rng_rank_;
  std::vector<Collected> collected_;
  std::vector<Progress> progress_;
  torch::Tensor rng_;
};

}  // namespace cohort::detail
