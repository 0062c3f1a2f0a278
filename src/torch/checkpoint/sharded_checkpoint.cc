// Sharded checkpoints (cohort/torch/checkpoint/sharded_checkpoint.h); the gathered save is in
// gathered_checkpoint.cc, what both share in sharded_common.h. Every form works on
// RankHoldings (Note [Rank holdings] in parameter_shard.h), whatever wrapper described them.
//
// Note [Sharded save]
//  1. Every rank checks its arguments; the ranks agree (rethrow_on_every_rank).
//  2. Rank 0 draws the save's token and broadcasts it: every file name holds it, so a save
//     never overwrites a file that the current manifest names.
//  3. Every rank writes its file (checkpoint_file.h: temporary file, fsync, rename), then the
//     ranks agree; on failure each removes the file it wrote.
//  4. Every rank's ranges, file size and CRC-32 are all-gathered; rank 0 writes the manifest
//     naming them (the same atomic write) and broadcasts whether that worked. Until its rename
//     the directory's manifest is the previous save's, whose files are all still there.
//  5. Every rank removes the shard files of earlier saves that it sees.
// So a crash at any point leaves either the previous checkpoint or the new one loadable, and a
// directory without a manifest is a first save that never finished: no checkpoint at all.
//
// Note [Sharded load]
//  1. The ranks agree on their arguments; rank 0 reads the manifest and broadcasts it (or that
//     there is none, or its error); rank 0's job check decides whether it is resumed.
//  2. Every rank matches the manifest against its holdings and optimizer, and works out which
//     saved files hold a range it needs; the ranks agree.
//  3. Which rank sees which file, and which needs it, is all-gathered (Note [Shard files and
//     file systems]). A file that some rank needs and no rank sees: every rank throws.
//  4. File by file, in manifest order: each rank that needs it and sees it reads it; to each
//     rank that needs it but does not see it, the lowest rank that sees it sends it. Every
//     file is checked against its footer's CRC-32 and the manifest's; only the needed ranges
//     are kept. The ranks agree: nothing has been changed yet.
//  5. The shards take their values; where a wrapper keeps whole parameters besides its shards
//     (ZeRO), the shards are all-gathered into them; where it keeps gathered copies (FSDP's
//     units gathered at the time), they are gathered again (RankHoldings::after_load);
//     buffers, optimizer state and options, sampler, generator and counters are restored; the
//     ranks agree.
//
// Note [Shard files and file systems]
// A save needs every rank to be able to write its file into `directory` as that rank sees it:
// a shared file system, or a local directory of the same name on every node. A load needs
// every saved file to be visible to at least one rank: with a shared file system every rank
// reads just what it needs; with node-local directories and the ranks on the nodes where the
// files were written, each rank reads its node's files and the others are sent over the group.
// Only the manifest must be where rank 0 sees it. A sharded checkpoint thus assumes no more than
// checkpoint.h's single file does (a path rank 0 can read) when it is loaded by a single node,
// and loads across nodes without a shared file system as long as no saved file was lost.
#include "cohort/torch/checkpoint/sharded_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/optimizer_codec.h"
#include "checkpoint/piece_install.h"
#include "checkpoint/prepared_save.h"
#include "checkpoint/shard_manifest.h"
#include "checkpoint/shard_pieces.h"
#include "checkpoint/sharded_common.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/core/check.h"
#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"
#include "rank_holdings.h"

namespace cohort {
namespace {

using detail::allgather_rows;
using detail::caught;
using detail::concat;
using detail::join;
using detail::kLoad;
using detail::kSave;
using detail::Manifest;
using detail::OptimizerCodec;
using detail::ParameterShard;
using detail::RankHoldings;
using detail::shard_names;

// ---- the manifest

detail::ManifestOptimizer optimizer_entry(const torch::optim::Optimizer& optimizer,
                                          const OptimizerCodec& codec,
                                          const RankHoldings& holdings) {
  const auto names = shard_names(holdings);
  detail::ManifestOptimizer entry;
  entry.kind = codec.kind();
  for (const auto& group : optimizer.param_groups()) {
    detail::ManifestParamGroup saved;
    saved.options = codec.options_json(group.options());
    for (const auto& tensor : group.params()) {
      saved.params.push_back(names.at(tensor.unsafeGetTensorImpl()));
    }
    entry.groups.push_back(std::move(saved));
  }
  return entry;
}

// Everything of the manifest but its tensors and files, taken from the state when the save
// starts.
Manifest manifest_base(const RankHoldings& holdings, const TrainingState& state,
                       const OptimizerCodec* codec, int world_size, const std::string& token) {
  Manifest m;
  m.world_size = world_size;
  m.token = token;
  m.job_id = detail::current_job_id();
  m.step = state.step;
  m.epoch = state.epoch;
  m.rng = state.rng;
  if (state.sampler != nullptr) m.sampler = detail::sampler_record(*state.sampler);
  if (state.grad_scaler != nullptr) m.grad_scaler = state.grad_scaler->state();
  if (state.lr_scheduler != nullptr) m.lr_scheduler = state.lr_scheduler->state();
  if (state.optimizer != nullptr) m.optimizer = optimizer_entry(*state.optimizer, *codec, holdings);
  return m;
}

// The tensors and files, from the table of every rank's ranges and file.
void complete_manifest(Manifest& m, const RankHoldings& holdings,
                       const std::vector<int64_t>& table) {
  m.tensors = detail::tensor_table(holdings, table, m.world_size);
  const size_t row = table.size() / static_cast<size_t>(m.world_size);
  m.files.clear();
  for (int r = 0; r < m.world_size; ++r) {
    m.files.push_back({detail::shard_file_name(r, m.world_size, m.token),
                       static_cast<uint64_t>(table[r * row]),
                       static_cast<uint32_t>(table[r * row + 1])});
  }
}

// ---- sharded save (Note [Sharded save])

std::string new_token() {
  std::random_device device;
  const uint64_t value = (static_cast<uint64_t>(device()) << 32) ^ device();
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string broadcast_token(Group& group) {
  std::string token = group.rank() == 0 ? new_token() : "";
  int64_t status = detail::kStatusOk;
  detail::broadcast_outcome(group, status, token, /*root=*/0, kSave);
  return token;
}

detail::ManifestFile write_shard_file(detail::PreparedShardedSave& save, Group& group,
                                      const detail::FileWriteHooks& hooks) {
  const std::string name = detail::shard_file_name(group.rank(), group.size(), save.token);
  const std::string path = join(save.directory, name);
  detail::make_checkpoint_directory(save.directory);
  uint64_t bytes = 0;
  const uint32_t crc = detail::write_checkpoint_file(
      path, detail::archive_producer(path, *save.archive), hooks, &bytes);
  return {name, bytes + kCheckpointFooterBytes, crc};
}

// The manifest, written by rank 0 and read back through the parser, so that a manifest that
// would not load is never written.
void write_manifest(const std::string& directory, const Manifest& manifest) {
  const std::string path = join(directory, detail::kManifestName);
  const std::string text = detail::manifest_text(manifest);
  detail::parse_manifest(path, text);
  detail::write_checkpoint_file(path, text);
}

// Best effort: a file left over costs disk space, never a wrong load (no manifest names it).
void remove_earlier_saves(const std::string& directory, const std::string& token) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    const auto saved = detail::token_of_shard_file(name);
    if (saved && *saved != token) ::unlink(entry.path().c_str());
  }
}

// Steps 4 of Note [Sharded save]: the table of every rank's ranges and file, and rank 0's
// manifest; the failure every rank gets (null: none).
std::exception_ptr commit_manifest(detail::PreparedShardedSave& save, Group& group,
                                   const detail::ManifestFile& file, CallSite site) {
  const std::vector<int64_t> table = detail::gather_table(group, save.ranges, file);
  int64_t status = detail::kStatusOk;
  std::string message;
  if (group.rank() == 0) {
    try {
      complete_manifest(save.manifest, save.holdings, table);
      write_manifest(save.directory, save.manifest);
    } catch (const std::exception& e) {
      status = detail::kStatusFailed;
      message = e.what();
    }
  }
  detail::broadcast_outcome(group, status, message, /*root=*/0, site);
  if (status == detail::kStatusOk) return nullptr;
  return std::make_exception_ptr(CheckpointError(message));
}

void save_sharded(const std::string& directory, Group& group, RankHoldings holdings,
                  const TrainingState& state, const torch::nn::Module* expected_module) {
  detail::PreparedShardedSave save =
      detail::prepare_sharded_save(directory, group, std::move(holdings), state, expected_module);
  detail::finish_sharded_save(save, group, {}, kSave);
}

// ---- sharded load (Note [Sharded load])

// A shard file of some save in `directory`, or "" (a directory with none is no checkpoint).
std::string some_shard_file(const std::string& directory) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(directory, error)) {
    const std::string name = entry.path().filename().string();
    if (detail::token_of_shard_file(name)) return name;
  }
  return "";
}

// Rank 0's manifest on every rank; nullopt when there is none, and when there is none to resume
// under LoadOptions::start_afresh (Note [Job identity]): a manifest that cannot be read, or
// shards without one (a save cut short before its manifest, or a manifest removed), which
// otherwise throw on every rank.
std::optional<Manifest> broadcast_manifest(const std::string& directory, Group& group,
                                           const LoadOptions& options) {
  const std::string path = join(directory, detail::kManifestName);
  int64_t status = detail::kStatusOk;
  std::string text;
  if (group.rank() == 0) {
    detail::read_file_outcome(path, status, text);
    const std::string shard = status == detail::kStatusMissing ? some_shard_file(directory) : "";
    if (!shard.empty()) {
      status = detail::kStatusFailed;
      text = detail::concat("sharded checkpoint '", directory, "' holds shard files ('", shard,
                            "', ...) but no ", detail::kManifestName,
                            ": a save was cut short before its manifest, or the manifest was "
                            "removed, and the shards cannot be loaded without it");
    }
  }
  detail::broadcast_outcome(group, status, text, /*root=*/0, kLoad);
  if (status == detail::kStatusMissing) return std::nullopt;
  if (status == detail::kStatusFailed) {
    detail::pass_over(text, options, group.rank() == 0);
    return std::nullopt;
  }
  return detail::parse_manifest(path, text);  // the same bytes: the same outcome everywhere
}

// What this rank restores, worked out and checked before anything is changed.
struct LoadPlan {
  detail::TensorMatch match;
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;  // per param group
  std::optional<detail::SamplerPlace> sampler;
  std::optional<optim::LrSchedulerState> lr_scheduler;
  std::unique_ptr<detail::PieceCollector> pieces;
};

std::string name_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out + "]";
}

// The saved param groups must be this optimizer's: same kind, same parameters in each group.
std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> plan_optimizer(
    const std::string& directory, const Manifest& m, const torch::optim::Optimizer& optimizer,
    const OptimizerCodec& codec, const RankHoldings& holdings) {
  if (!m.optimizer) detail::throw_missing_section(directory, "optimizer");
  if (m.optimizer->kind != codec.kind()) {
    detail::throw_mismatch(directory, concat("it was saved with a ", m.optimizer->kind,
                                             " optimizer, but this one is ", codec.kind()));
  }
  const auto names = shard_names(holdings);
  const auto& groups = optimizer.param_groups();
  if (m.optimizer->groups.size() != groups.size()) {
    detail::throw_mismatch(directory,
                           concat("it was saved with ", m.optimizer->groups.size(),
                                  " param groups, but the optimizer has ", groups.size()));
  }
  std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<std::string> mine;
    for (const auto& tensor : groups[g].params()) {
      mine.push_back(names.at(tensor.unsafeGetTensorImpl()));
    }
    const auto& saved = m.optimizer->groups[g];
    if (saved.params != mine) {
      detail::throw_mismatch(
          directory, concat("param group ", g, " holds ", name_list(saved.params),
                            " in the checkpoint but ", name_list(mine), " in the optimizer"));
    }
    try {
      options.push_back(codec.options_from_json(saved.options, groups[g].options()));
    } catch (const nlohmann::json::exception& e) {
      detail::throw_malformed(directory,
                              concat("the options of its param group ", g, ": ", e.what()));
    }
  }
  return options;
}

LoadPlan plan_load(const std::string& directory, const Manifest& m, const RankHoldings& holdings,
                   const TrainingState& state, const OptimizerCodec* codec, int rank) {
  LoadPlan plan;
  plan.match = detail::match_tensors(directory, m, holdings);
  std::unordered_map<const void*, bool> stepped;
  if (state.optimizer != nullptr) {
    plan.options = plan_optimizer(directory, m, *state.optimizer, *codec, holdings);
    for (const auto& group : state.optimizer->param_groups()) {
      for (const auto& tensor : group.params()) stepped[tensor.unsafeGetTensorImpl()] = true;
    }
  }
  if (state.sampler != nullptr) {
    if (!m.sampler) detail::throw_missing_section(directory, "sampler");
    plan.sampler = detail::sampler_place(directory, *m.sampler, *state.sampler);
  }
  if (state.grad_scaler != nullptr && !m.grad_scaler) {
    detail::throw_missing_section(directory, "grad_scaler");
  }
  if (state.lr_scheduler != nullptr) {  // Note [Checkpoints without a scheduler]
    if (m.lr_scheduler) {
      detail::check_lr_scheduler_state(directory, *m.lr_scheduler, *state.lr_scheduler);
      plan.lr_scheduler = m.lr_scheduler;
    } else {
      plan.lr_scheduler = detail::lr_scheduler_fallback(directory, m.step, *state.lr_scheduler);
    }
  }
  if (state.rng && !m.rng) {
    throw CheckpointError(concat("checkpoint '", directory,
                                 "' was saved without the random generator states; set "
                                 "TrainingState::rng = false to load it without"));
  }
  std::vector<detail::PieceNeed> needs;
  for (size_t s = 0; s < holdings.shards.size(); ++s) {
    const ParameterShard& shard = holdings.shards[s];
    const bool wants_state = stepped.count(shard.tensor.unsafeGetTensorImpl()) != 0;
    needs.push_back({plan.match.shards[s], shard.offset, shard.length, shard.dtype, wants_state});
  }
  for (size_t u = 0; u < holdings.unsharded.size(); ++u) {
    const torch::Tensor& tensor = holdings.unsharded[u].tensor;
    needs.push_back({plan.match.unsharded[u], 0, tensor.numel(), tensor.scalar_type(), false});
  }
  const int rng_rank = state.rng ? rank % m.world_size : -1;
  plan.pieces = std::make_unique<detail::PieceCollector>(m.tensors, std::move(needs), rng_rank);
  return plan;
}

// What a rank sees at a shard file's path (step 3 of Note [Sharded load]); a FIFO or a
// directory in a file's place is told apart from a missing file (issue 35).
enum FileSight : uint8_t { kAbsent = 0, kRegularFile = 1, kNotAFile = 2 };

uint8_t sight_of(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return kAbsent;
  return S_ISREG(info.st_mode) ? kRegularFile : kNotAFile;
}

// The size the manifest gives must be the file's too (a manifest rewritten by hand or by a
// tool loaded: issue 35). Checked after the file's own footer and CRC, which
// say more about a truncated or replaced file.
void check_size(const std::string& directory, const std::string& path, uint64_t expected) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || static_cast<uint64_t>(info.st_size) == expected) return;
  throw CheckpointError(concat("shard file '", path, "' is not the one checkpoint '", directory,
                               "' names: it holds ", info.st_size, " bytes but the manifest says ",
                               expected, "; load an older checkpoint, or start the run over"));
}

// The verified payload of saved rank `rank`'s file.
std::string read_shard_file(const std::string& directory, const Manifest& m, int rank) {
  const detail::ManifestFile& file = m.files[static_cast<size_t>(rank)];
  const std::string path = join(directory, file.name);
  uint32_t crc = 0;
  std::optional<std::string> payload = detail::read_checkpoint_file(path, &crc);
  if (!payload) {
    throw CheckpointError(concat("checkpoint '", directory, "' is incomplete: its shard file '",
                                 path, "' (saved by rank ", rank,
                                 ") is missing; put it back, or load an older checkpoint"));
  }
  if (crc != file.crc32) {
    throw CheckpointError(concat("shard file '", path, "' is not the one checkpoint '", directory,
                                 "' names: its CRC-32 is ", detail::hex32(crc),
                                 " but the manifest says ", detail::hex32(file.crc32),
                                 "; load an older checkpoint, or start the run over"));
  }
  check_size(directory, path, file.bytes);
  return std::move(*payload);
}

// Step 4 of Note [Sharded load]. Returns this rank's first failure (every rank goes through
// every file, so that the point-to-point transfers all match).
std::exception_ptr read_needed_files(Group& group, const std::string& directory, const Manifest& m,
                                     const std::vector<uint8_t>& seen,
                                     const std::vector<uint8_t>& needed,
                                     detail::PieceCollector& pieces) {
  const int world = group.size();
  const int me = group.rank();
  const size_t files = m.files.size();
  auto at = [&](const std::vector<uint8_t>& flags, int r, size_t f) {
    return flags[static_cast<size_t>(r) * files + f] == kRegularFile;  // needed: 1 or 0
  };
  std::exception_ptr first;
  for (size_t f = 0; f < files; ++f) {
    const int saved_rank = static_cast<int>(f);
    std::vector<int> remote;  // need it, do not see it
    int reader = -1;          // sends it to them
    for (int r = 0; r < world; ++r) {
      if (at(needed, r, f) && !at(seen, r, f)) remote.push_back(r);
      if (reader < 0 && at(seen, r, f)) reader = r;
    }
    const bool i_need = at(needed, me, f);
    const bool i_send = !remote.empty() && me == reader;
    int64_t status = detail::kStatusOk;
    std::string bytes;
    if ((i_need && at(seen, me, f)) || i_send) {
      try {
        bytes = read_shard_file(directory, m, saved_rank);
      } catch (const std::exception& e) {
        status = detail::kStatusFailed;
        bytes = e.what();
      }
    }
    if (i_send) {
      for (int r : remote) detail::send_outcome(group, r, status, bytes, kLoad);
    }
    if (std::find(remote.begin(), remote.end(), me) != remote.end()) {
      detail::recv_outcome(group, reader, status, bytes, kLoad);
    }
    if (!i_need || first) continue;
    try {
      if (status != detail::kStatusOk) throw CheckpointError(bytes);
      pieces.consume(saved_rank, join(directory, m.files[f].name), bytes);
    } catch (...) {
      first = std::current_exception();
    }
  }
  return first;
}

// A file that some rank needs and no rank sees: the same verdict on every rank.
void check_every_needed_file_seen(const std::string& directory, const Manifest& m, int world,
                                  const std::vector<uint8_t>& seen,
                                  const std::vector<uint8_t>& needed) {
  const size_t files = m.files.size();
  for (size_t f = 0; f < files; ++f) {
    bool wanted = false, visible = false, other = false;
    for (int r = 0; r < world; ++r) {
      wanted |= needed[static_cast<size_t>(r) * files + f] != 0;
      visible |= seen[static_cast<size_t>(r) * files + f] == kRegularFile;
      other |= seen[static_cast<size_t>(r) * files + f] == kNotAFile;
    }
    if (!wanted || visible) continue;
    if (other) {
      throw CheckpointError(
          concat("checkpoint '", directory, "' is damaged: its shard file '",
                 join(directory, m.files[f].name), "' (saved by rank ", f,
                 ") is not a regular file (a directory, FIFO, device or socket is in its place). "
                 "Put the file back, or load an older checkpoint"));
    }
    throw CheckpointError(concat(
        "checkpoint '", directory, "' is incomplete: its shard file '",
        join(directory, m.files[f].name), "' (saved by rank ", f,
        ") is missing: no rank can read it. Put it back (a sharded checkpoint needs every file "
        "its manifest names where some rank sees it), or load an older checkpoint"));
  }
}

void restore_optimizer(torch::optim::Optimizer& optimizer, const OptimizerCodec& codec,
                       const RankHoldings& holdings, LoadPlan& plan) {
  detail::install_optimizer_state(optimizer, codec, holdings, plan.pieces->collected(), 0);
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_options(std::move(plan.options[g]));
}

// Step 5 of Note [Sharded load], but for the all-gather of full parameters.
void restore_local(const std::string& directory, const RankHoldings& holdings, TrainingState& state,
                   const OptimizerCodec* codec, const Manifest& m, LoadPlan& plan) {
  torch::NoGradGuard no_grad;
  const auto& collected = plan.pieces->collected();
  const size_t shards = holdings.shards.size();
  for (size_t u = 0; u < holdings.unsharded.size(); ++u) {
    const torch::Tensor& tensor = holdings.unsharded[u].tensor;
    tensor.detach().copy_(collected[shards + u].values.view(tensor.sizes()));
  }
  if (state.optimizer != nullptr) restore_optimizer(*state.optimizer, *codec, holdings, plan);
  if (state.sampler != nullptr) detail::restore_sampler(*state.sampler, *plan.sampler);
  if (state.grad_scaler != nullptr) state.grad_scaler->load_state(*m.grad_scaler);
  // After the optimizer, whose options hold the saved LRs: the scheduler sets them again.
  if (state.lr_scheduler != nullptr) state.lr_scheduler->load_state(*plan.lr_scheduler);
  if (state.rng) detail::set_cpu_generator_state(directory, plan.pieces->rng());
  state.step = m.step;
  state.epoch = m.epoch;
}

bool load_sharded(const std::string& directory, Group& group, const RankHoldings& holdings,
                  TrainingState& state, const LoadOptions& options,
                  const torch::nn::Module* expected_module) {
  const OptimizerCodec* codec = detail::agree_on_arguments(group, state, holdings, expected_module,
                                                           "load_sharded_checkpoint", kLoad);
  const std::optional<Manifest> manifest = broadcast_manifest(directory, group, options);
  if (!manifest) return false;
  const Manifest& m = *manifest;
  const detail::JobCheck job =
      detail::broadcast_job_check(group, {detail::current_job_id(), options.any_job}, kLoad);
  const std::string passed_over = detail::passed_over_because(directory, m.job_id, job);
  if (!passed_over.empty()) {  // the same on every rank: all return or all throw
    detail::pass_over(passed_over, options, group.rank() == 0);
    return false;
  }
  LoadPlan plan;
  std::vector<uint8_t> seen(m.files.size(), 0), needed;
  std::exception_ptr error = caught([&] {
    plan = plan_load(directory, m, holdings, state, codec, group.rank());
    needed = plan.pieces->files_needed(m.world_size);
    for (size_t f = 0; f < m.files.size(); ++f) {
      seen[f] = sight_of(join(directory, m.files[f].name));
    }
  });
  detail::rethrow_on_every_rank(group, error, kLoad);
  const std::vector<uint8_t> all_seen = allgather_rows(group, seen, kLoad);
  const std::vector<uint8_t> all_needed = allgather_rows(group, needed, kLoad);
  check_every_needed_file_seen(directory, m, group.size(), all_seen, all_needed);
  error = read_needed_files(group, directory, m, all_seen, all_needed, *plan.pieces);
  if (!error) error = caught([&] { plan.pieces->check_complete(directory); });
  detail::rethrow_on_every_rank(group, error, kLoad);
  detail::restore_shard_values(holdings, plan.pieces->collected(), 0);
  if (detail::keeps_full_parameters(holdings)) {
    detail::gather_full_parameters(group, holdings,
                                   detail::all_shard_ranges(group, holdings, kLoad), kLoad);
  }
  if (holdings.after_load) holdings.after_load();
  error = caught([&] { restore_local(directory, holdings, state, codec, m, plan); });
  detail::rethrow_on_every_rank(group, error, kLoad);
  return true;
}

// ---- one process: a group of one

std::shared_ptr<Group> group_of_one() {
  return Group::create_inproc(std::make_shared<InprocFabric>(1), 0);
}

RankHoldings holdings_of(const TrainingState& state, const Group& group) {
  return state.module != nullptr
             ? detail::replicated_holdings(*state.module, group.rank(), group.size())
             : RankHoldings{};
}

}  // namespace

void save_sharded_checkpoint(const std::string& directory, const ShardedParameters& sharded,
                             const TrainingState& state) {
  save_sharded(directory, *sharded.group, sharded.holdings(), state, sharded.module);
}

bool load_sharded_checkpoint(const std::string& directory, const ShardedParameters& sharded,
                             TrainingState& state, const LoadOptions& options) {
  return load_sharded(directory, *sharded.group, sharded.holdings(), state, options,
                      sharded.module);
}

void save_sharded_checkpoint(const std::string& directory, Group& group,
                             const TrainingState& state) {
  save_sharded(directory, group, holdings_of(state, group), state, nullptr);
}

bool load_sharded_checkpoint(const std::string& directory, Group& group, TrainingState& state,
                             const LoadOptions& options) {
  return load_sharded(directory, group, holdings_of(state, group), state, options, nullptr);
}

void save_sharded_checkpoint(const std::string& directory, const TrainingState& state) {
  save_sharded_checkpoint(directory, *group_of_one(), state);
}

bool load_sharded_checkpoint(const std::string& directory, TrainingState& state,
                             const LoadOptions& options) {
  return load_sharded_checkpoint(directory, *group_of_one(), state, options);
}

namespace detail {

PreparedShardedSave prepare_sharded_save(const std::string& directory, Group& group,
                                         RankHoldings holdings, const TrainingState& state,
                                         const torch::nn::Module* expected_module,
                                         TensorSnapshot* snapshot, uint64_t snapshot_budget) {
  PreparedShardedSave save;
  save.codec = agree_on_arguments(group, state, holdings, expected_module,
                                  "save_sharded_checkpoint", kSave);
  save.directory = directory;
  save.token = broadcast_token(group);
  save.ranges = saved_ranges(holdings, group.rank());
  const std::string path =
      join(directory, shard_file_name(group.rank(), group.size(), save.token));
  save.staged =
      snapshot != nullptr && state.parts.empty() &&
      shard_snapshot_bytes(holdings, save.ranges, state.optimizer, save.codec) <= snapshot_budget;
  save.error = caught([&] {
    const torch::Tensor rng = state.rng ? cpu_generator_state() : torch::Tensor();
    save.archive = shard_archive(path, holdings, save.ranges, state.optimizer, save.codec, rng,
                                 save.staged ? snapshot : nullptr);
    save.manifest = manifest_base(holdings, state, save.codec, group.size(), save.token);
  });
  for (const ParameterShard& shard : holdings.shards) {
    save.reads.push_back({shard.name, shard.tensor, shard.tensor._version()});
  }
  save.holdings = std::move(holdings);
  return save;
}

void finish_sharded_save(PreparedShardedSave& save, Group& group, const FileWriteHooks& hooks,
                         CallSite site) {
  const std::string mine =
      join(save.directory, shard_file_name(group.rank(), group.size(), save.token));
  ManifestFile file;
  std::exception_ptr failure =
      save.error ? save.error : caught([&] { file = write_shard_file(save, group, hooks); });
  failure = first_failure_on_any_rank(group, failure, site);
  if (!failure) failure = commit_manifest(save, group, file, site);
  // Only a failure every rank agrees on removes the file: after a broken group (an exception
  // thrown above), rank 0 may have written a manifest that names it.
  if (failure) {
    ::unlink(mine.c_str());
    std::rethrow_exception(failure);
  }
  remove_earlier_saves(save.directory, save.token);
}

}  // namespace detail
}  // namespace cohort
