#include "elastic/elastic_checkpoint.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "call_sites.h"
#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/shard_manifest.h"
#include "cohort/comm/elastic.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/checkpoint/sharded_checkpoint.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::detail {
namespace {

std::string sampler_file(const std::string& directory, int64_t step) {
  return directory + "/elastic-" + std::to_string(step) + ".txt";
}

constexpr const char* kReplicaName = "replica.ckpt";

std::string replica_file(const std::string& directory) {
  return directory + "/" + kReplicaName;
}

// The sampler's file of `step`, written whole or not at all (a full disk fails the write at the
// flush: the stream is closed and checked before the rename, and a failed temporary is
// removed). Returns whether the file is new (not left by an earlier save of the same step), so
// that a checkpoint that then fails can take it away again. Throws CheckpointError.
bool write_sampler_file(const std::string& directory, int64_t step, const ElasticSampler& s,
                        const Membership& m) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  const std::string path = sampler_file(directory, step), temporary = path + ".tmp";
  const bool fresh = !std::filesystem::exists(path, error);
  std::ofstream out(temporary);
  out << s.epoch() << ' ' << s.position() << ' ' << s.skipped() << '\n'
      << "written by rank 0 of generation " << m.generation << " (" << m.size << " ranks)\n";
  out.close();
  if (!out) {
    std::filesystem::remove(temporary, error);
    throw CheckpointError("ElasticTrainer: cannot write '" + temporary +
                          "' (is the disk full, or the directory not writable?)");
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    throw CheckpointError("ElasticTrainer: cannot rename '" + temporary + "' to '" + path + "'");
  }
  return fresh;
}

// After a checkpoint of `step` failed: its sampler file goes when this save made it.
void remove_sampler_file(const std::string& directory, int64_t step, bool made_now) {
  std::error_code ignored;
  if (made_now) std::filesystem::remove(sampler_file(directory, step), ignored);
}

// Best effort: the sampler files of other steps (their checkpoints were replaced).
void remove_other_sampler_files(const std::string& directory, int64_t step) {
  std::error_code error;
  const std::string keep = "elastic-" + std::to_string(step) + ".txt";
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("elastic-", 0) == 0 && name != keep)
      std::filesystem::remove(entry.path(), error);
  }
}

// The sampler's place saved with the checkpoint of `step`: {epoch, position, skipped}, or
// nothing when its file is missing or unreadable.
std::optional<std::array<int64_t, 3>> read_sampler_file(const std::string& directory,
                                                        int64_t step) {
  std::ifstream in(sampler_file(directory, step));
  int64_t epoch = -1, position = -1, skipped = -1;
  if (!(in >> epoch >> position >> skipped)) return std::nullopt;
  return std::array<int64_t, 3>{epoch, position, skipped};
}

[[noreturn]] void throw_missing_sampler_file(const std::string& directory, int64_t step) {
  throw ElasticError("ElasticTrainer: checkpoint '" + directory + "' of step " +
                     std::to_string(step) + " has no readable " + sampler_file(directory, step) +
                     " (the sampler's place): write it with ElasticTrainer::save_checkpoint");
}

bool holds(const std::string& directory, const std::string& name) {
  std::error_code error;
  return std::filesystem::exists(directory + "/" + name, error);
}

// The user sets ElasticTrainer's LoadOptions as ElasticTrainerOptions::resume: a load's error
// names its fields so.
LoadOptions as_resume(LoadOptions options) {
  options.named_as = "ElasticTrainerOptions::resume.";
  return options;
}

void restore_sampler(ElasticSampler& sampler, const std::array<int64_t, 3>& place) {
  sampler.restore(static_cast<uint64_t>(place[0]), static_cast<size_t>(place[1]),
                  static_cast<size_t>(place[2]));
}

}  // namespace

void save_replica_checkpoint(const std::string& directory, torch::nn::Module& module,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler, const Membership& membership,
                             const std::vector<std::pair<std::string, CheckpointPart*>>& parts) {
  const bool made_now = write_sampler_file(directory, committed, sampler, membership);
  TrainingState state;
  state.parts = parts;
  state.module = &module;
  state.optimizer = &optimizer;
  state.step = committed;
  state.rng = false;
  try {
    save_checkpoint(replica_file(directory), state);  // atomic: the old file stays on failure
  } catch (...) {
    remove_sampler_file(directory, committed, made_now);
    throw;
  }
  remove_other_sampler_files(directory, committed);
}

std::optional<int64_t> load_replica_checkpoint(
    const std::string& directory, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
    ElasticSampler& sampler, const LoadOptions& options,
    std::vector<std::pair<std::string, CheckpointPart*>> parts) {
  TrainingState state;
  state.module = &module;
  state.optimizer = &optimizer;
  state.rng = false;
  bool loaded = false;
  if (!holds(directory, kReplicaName) && holds(directory, kManifestName)) {
    // A sharded strategy's checkpoint: read whole, as one process loads any sharded checkpoint.
    if (!parts.empty()) {
      throw CheckpointError("ElasticTrainer: '" + directory +
                            "' holds a sharded strategy's checkpoint, which has no '" +
                            parts.front().first +
                            "' state for this job (DiLoCo): resume it "
                            "under the strategy that wrote it, or start in another directory");
    }
    loaded = load_sharded_checkpoint(directory, state, as_resume(options));
  } else {
    state.parts = std::move(parts);
    loaded = load_checkpoint(replica_file(directory), state, as_resume(options));
  }
  if (!loaded) return std::nullopt;
  const auto place = read_sampler_file(directory, state.step);
  if (!place) throw_missing_sampler_file(directory, state.step);
  restore_sampler(sampler, *place);
  return state.step;
}

void save_elastic_checkpoint(const std::string& directory, const ShardedParameters& view,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler, const Membership& membership) {
  // Rank 0's sampler file first; its failure is every member's before the collective save.
  int64_t status = kStatusOk;
  std::string error;
  bool made_now = false;
  if (view.group->rank() == 0) {
    try {
      made_now = write_sampler_file(directory, committed, sampler, membership);
    } catch (const CheckpointError& e) {
      status = kStatusFailed;
      error = e.what();
    }
  }
  broadcast_outcome(*view.group, status, error, 0, call_sites::kElasticHeal);
  if (status == kStatusFailed) throw CheckpointError(error);
  TrainingState state;
  state.module = view.module;
  state.optimizer = &optimizer;
  state.step = committed;
  state.rng = false;
  try {
    save_sharded_checkpoint(directory, view, state);  // fails on every rank alike
  } catch (const CheckpointError&) {
    if (view.group->rank() == 0) remove_sampler_file(directory, committed, made_now);
    throw;
  }
  if (view.group->rank() == 0) remove_other_sampler_files(directory, committed);
}

std::optional<int64_t> load_elastic_checkpoint(const std::string& directory,
                                               const ShardedParameters& view,
                                               torch::optim::Optimizer& optimizer,
                                               ElasticSampler& sampler,
                                               const LoadOptions& options) {
  // A kDdp job's checkpoint (one file of whole tensors) is not re-sliced into shards: refused by
  // name on every member rather than passed over (a job then started from step 0 unsaid).
  int64_t status = kStatusOk;
  std::string error;
  if (view.group->rank() == 0 && !holds(directory, kManifestName) &&
      holds(directory, kReplicaName)) {
    status = kStatusFailed;
    error = "ElasticTrainer: '" + directory +
            "' holds a checkpoint written under kDdp (replica.ckpt), which a sharded strategy "
            "does not resume: resume it with ElasticTrainerOptions::strategy kDdp (the "
            "examples' --strategy ddp), or start in another directory";
  }
  broadcast_outcome(*view.group, status, error, 0, call_sites::kElasticHeal);
  if (status == kStatusFailed) throw CheckpointError(error);
  TrainingState state;
  state.module = view.module;
  state.optimizer = &optimizer;
  state.rng = false;
  if (!load_sharded_checkpoint(directory, view, state, as_resume(options))) return std::nullopt;
  auto place = torch::full({3}, -1, torch::kInt64);
  if (view.group->rank() == 0) {
    if (const auto read = read_sampler_file(directory, state.step)) {
      place = torch::tensor({(*read)[0], (*read)[1], (*read)[2]});
    }
  }
  CollectiveOptions root0;
  root0.site = call_sites::kElasticHeal;
  view.group->broadcast(tensor_buffer(place), root0);
  const auto* v = place.data_ptr<int64_t>();
  if (v[0] < 0) throw_missing_sampler_file(directory, state.step);
  restore_sampler(sampler, {v[0], v[1], v[2]});
  return state.step;
}

}  // namespace cohort::detail
