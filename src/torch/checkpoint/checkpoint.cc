// cohort::save_checkpoint / load_checkpoint (include/cohort/torch/checkpoint/checkpoint.h).
//
// Note [Checkpoint collectives]: in the group forms only rank 0 touches the file, and every
// outcome is decided on one rank and sent to all, so that every rank returns or throws at the
// same point and none is left waiting in a collective the others skipped.
//  - save: allgather of the generator states (every rank's is saved); rank 0 writes; broadcast
//    of {status, length} and, on failure, rank 0's message.
//  - load: rank 0 reads and verifies the file; broadcast of {status, length} (ok, missing,
//    failed) and then the payload (or rank 0's message); every rank deserializes from memory;
//    an allgather of "restored" flags so that a rank whose state did not fit fails them all.
//    Between the two broadcasts, rank 0's JobCheck (Note [Job identity]), so that every rank
//    decides the same from the same bytes.
// Every collective has the group's deadline, so a rank that never arrives is a TimeoutError.
//
// Note [Job identity]: a job restarted by its launcher (cohortrun --max-restarts) runs the
// program again, which loads its checkpoint; but a checkpoint at the same path may also be an
// earlier job's, finished even, and resuming it trains nothing. So a save records the job's
// identity (COHORT_JOB_ID: cohortrun gives every job a fresh one, the same in each restart)
// and a load resumes only a checkpoint of the loading job, unless LoadOptions::any_job says
// any will do. A process without a job id cannot tell its checkpoints from others', so it
// resumes only when asked. A checkpoint it does not resume, or cannot read, is not replaced
// by accident: the load throws, naming both ways on (LoadOptions::any_job resumes it,
// LoadOptions::start_afresh passes it over with a warning so that the first save replaces it).
#include "cohort/torch/checkpoint/checkpoint.h"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/checkpoint_file.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/prepared_save.h"
#include "checkpoint/state_snapshot.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {
namespace {

detail::JobCheck job_check(const LoadOptions& options) {
  return {detail::current_job_id(), options.any_job};
}

// Restores on every rank, or passes the checkpoint over on every rank (returns false); throws
// on every rank if it failed on any (Note [Checkpoint collectives]).
bool restore_everywhere(const std::string& path, Group& group, const std::string& payload,
                        const detail::JobCheck& job, const LoadOptions& options,
                        TrainingState& state) {
  std::string error, passed_over;
  bool restored = false;
  try {
    restored = detail::decode_training_state(path, payload, group.rank(), job, state, passed_over);
  } catch (const std::exception& e) {
    error = e.what();
  }
  int64_t failed = error.empty() ? 0 : 1;
  std::vector<int64_t> all_failed(static_cast<size_t>(group.size()));
  group.allgather(make_buffer(&failed, 1), make_buffer(all_failed));
  if (!error.empty()) throw CheckpointError(error);
  for (int r = 0; r < group.size(); ++r) {
    if (all_failed[static_cast<size_t>(r)] != 0) {
      throw CheckpointError(detail::concat(
          "checkpoint '", path, "' could not be restored on rank ", r,
          " (see its error), so no rank goes on with it; give every rank the same model, "
          "optimizer and sampler"));
    }
  }
  // Every rank decided from the same bytes and JobCheck: all pass over, or all throw.
  if (!restored) detail::pass_over(passed_over, options, group.rank() == 0);
  return restored;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainingState& state) {
  detail::PreparedFileSave save = detail::prepare_file_save(path, nullptr, state);
  detail::finish_file_save(save, nullptr, {}, CallSite::kUser);
}

bool load_checkpoint(const std::string& path, TrainingState& state, const LoadOptions& options) {
  detail::check_training_state(state, "load_checkpoint");
  std::optional<std::string> payload;
  try {
    payload = detail::read_checkpoint_file(path);
  } catch (const CheckpointError& unreadable) {
    detail::pass_over(unreadable.what(), options, /*log=*/true);
    return false;
  }
  if (!payload) return false;
  std::string passed_over;
  if (detail::decode_training_state(path, *payload, /*rank=*/0, job_check(options), state,
                                    passed_over)) {
    return true;
  }
  detail::pass_over(passed_over, options, /*log=*/true);
  return false;
}

void save_checkpoint(const std::string& path, Group& group, const TrainingState& state) {
  detail::PreparedFileSave save = detail::prepare_file_save(path, &group, state);
  detail::finish_file_save(save, &group, {}, CallSite::kUser);
}

bool load_checkpoint(const std::string& path, Group& group, TrainingState& state,
                     const LoadOptions& options) {
  detail::check_training_state(state, "load_checkpoint");
  detail::check_optimizer_holds_module_parameters(state, "load_checkpoint");
  int64_t status = detail::kStatusOk;
  std::string bytes;
  if (group.rank() == 0) detail::read_file_outcome(path, status, bytes);
  detail::broadcast_outcome(group, status, bytes);
  if (status == detail::kStatusMissing) return false;
  if (status == detail::kStatusFailed) {  // rank 0's message, on every rank
    detail::pass_over(bytes, options, group.rank() == 0);
    return false;
  }
  const detail::JobCheck job = detail::broadcast_job_check(group, job_check(options));
  return restore_everywhere(path, group, bytes, job, options, state);
}

namespace detail {

PreparedFileSave prepare_file_save(const std::string& path, Group* group,
                                   const TrainingState& state, TensorSnapshot* snapshot,
                                   uint64_t snapshot_budget) {
  check_training_state(state, "save_checkpoint");
  check_optimizer_holds_module_parameters(state, "save_checkpoint");
  std::vector<torch::Tensor> rng_states;
  if (state.rng) {
    rng_states = group ? gather_generator_states(path, *group)
                       : std::vector<torch::Tensor>{cpu_generator_state()};
  }
  for (const auto& [name, part] : state.parts) part->before_save();  // on every rank
  PreparedFileSave save;
  save.path = path;
  if (group != nullptr && group->rank() != 0) return save;
  const std::optional<uint64_t> bytes = snapshot ? snapshot_bytes(state) : std::nullopt;
  save.staged = bytes && *bytes <= snapshot_budget;
  try {
    if (save.staged) {  // Note [Snapshot saves]
      std::optional<OptimizerStateCopies> copies;
      if (state.optimizer != nullptr) copies.emplace(*state.optimizer, *snapshot);
      save.archive = training_archive(path, state, group ? group->size() : 1, rng_states,
                                      current_job_id(), [&](torch::serialize::OutputArchive& out) {
                                        write_module(out, *state.module, snapshot);
                                      });
    } else {
      save.archive =
          training_archive(path, state, group ? group->size() : 1, rng_states, current_job_id());
    }
  } catch (...) {
    save.error = std::current_exception();
  }
  if (save.staged) return save;
  for (const auto& item : state.module->named_parameters()) {
    save.reads.push_back({item.key(), item.value(), item.value()._version()});
  }
  return save;
}

void finish_file_save(PreparedFileSave& save, Group* group, const FileWriteHooks& hooks,
                      CallSite site) {
  int64_t status = kStatusOk;
  std::string message;
  if (save.archive || save.error) {
    try {
      if (save.error) std::rethrow_exception(save.error);
      write_checkpoint_file(save.path, archive_producer(save.path, *save.archive), hooks);
    } catch (const std::exception& error) {
      if (group == nullptr) throw;
      status = kStatusFailed;
      message = error.what();
    }
  }
  if (group == nullptr) return;
  broadcast_outcome(*group, status, message, /*root=*/0, site);
  if (status != kStatusOk) throw CheckpointError(message);
}

}  // namespace detail
}  // namespace cohort
