// The manifest of a sharded checkpoint: which ranges of which tensors each saved rank's file
// holds, the files' sizes and CRC-32s, the optimizer's kind and param groups, the counters,
// sampler and job (docs/checkpoints.md, "Sharded checkpoints"). Rank 0 writes it last, so a
// directory without one is a save that never finished (Note [Sharded save] in
// sharded_checkpoint.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_state.h"
#include "rank_holdings.h"

namespace cohort::detail {

inline constexpr const char* kManifestName = "manifest.ckpt";

// [offset, offset + length) of a flattened tensor, saved in rank `rank`'s file.
struct ManifestPiece {
  int rank = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

struct ManifestTensor {
  std::string name;
  bool buffer = false;
  std::vector<int64_t> shape;
  std::string dtype;                  // c10::toString of the scalar type: "Float", "Half", ...
  std::vector<ManifestPiece> pieces;  // by offset; together exactly [0, numel)
  int64_t numel() const;
};

struct ManifestFile {  // files[r] is saved rank r's
  std::string name;    // in the checkpoint's directory
  uint64_t bytes = 0;  // the whole file, footer included
  uint32_t crc32 = 0;  // of its payload, as its footer says
};

struct ManifestParamGroup {
  nlohmann::json options;           // OptimizerCodec::options_json
  std::vector<std::string> params;  // the names of the parameters it steps, in order
};

struct ManifestOptimizer {
  std::string kind;  // OptimizerCodec::kind
  std::vector<ManifestParamGroup> groups;
};

struct Manifest {
  int world_size = 1;
  std::string token;   // the save's identity, part of every file name
  std::string job_id;  // COHORT_JOB_ID of the job that saved ("" for none)
  int64_t step = 0;
  int64_t epoch = 0;
  bool rng = false;  // each file holds its rank's generator state
  std::optional<SamplerRecord> sampler;
  std::optional<amp::GradScalerState> grad_scaler;
  std::optional<optim::LrSchedulerState> lr_scheduler;
  std::optional<ManifestOptimizer> optimizer;
  std::vector<ManifestTensor> tensors;
  std::vector<ManifestFile> files;
};

// The name of saved rank `rank`'s file: "shard-00002-of-00004.<token>.ckpt".
std::string shard_file_name(int rank, int world_size, const std::string& token);
// Whether `name` is a shard file name of some save; its token when it is.
std::optional<std::string> token_of_shard_file(const std::string& name);

std::string manifest_text(const Manifest& manifest);
// Parses and checks the manifest (pieces that tile each tensor exactly, plain file names, one
// file per rank). Throws CheckpointError naming `path` when it is not a valid manifest.
Manifest parse_manifest(const std::string& path, const std::string& text);

// Which manifest tensor each of `holdings`' shards and unsharded tensors is (by index, shards
// first). Throws CheckpointError naming `checkpoint` and the tensor when a tensor is missing on
// either side, or differs in shape, dtype or kind (parameter, buffer).
struct TensorMatch {
  std::vector<size_t> shards;
  std::vector<size_t> unsharded;
};
TensorMatch match_tensors(const std::string& checkpoint, const Manifest& manifest,
                          const RankHoldings& holdings);

}  // namespace cohort::detail
