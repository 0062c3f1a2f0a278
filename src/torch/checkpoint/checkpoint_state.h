// A TrainingState as the bytes of a torch archive (the payload of a checkpoint file), and back.
//
// Entries of the archive:
//   step, epoch, world_size      int64 scalars (world_size: ranks of the run that saved it)
//   job_id                       uint8: the COHORT_JOB_ID of the job that saved it (when set)
//   model                        nested: torch::nn::Module::save
//   optimizer                    nested: torch::optim::Optimizer::save (when one was given)
//   sampler                      nested: dataset_size, epoch, consumed (when one was given)
//   lr_scheduler                 nested: step, base_lrs (float64) (when one was given)
//   rng/<r>                      uint8: rank r's default CPU generator state (when rng)
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_file.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/checkpoint/checkpoint.h"

namespace cohort::detail {

// This process's default CPU generator state (a uint8 tensor), read under its lock.
torch::Tensor cpu_generator_state();

// Throws InvalidArgument when `state` has no module; `caller` names the function.
void check_training_state(const TrainingState& state, const char* caller);
// The group versions: the optimizer must hold the module's own parameters (not ZeRO shards).
void check_optimizer_holds_module_parameters(const TrainingState& state, const char* caller);

// The identity of the job this process belongs to: COHORT_JOB_ID, "" when unset.
std::string current_job_id();

// Writes the "model" entry (default: state.module->save).
using ModelWriter = std::function<void(torch::serialize::OutputArchive&)>;

// The archive of `state` saved by a run of `world_size` ranks of job `job_id` ("" for none);
// rng_states[r] is rank r's generator state (empty unless state.rng). Note [Archives of live
// tensors]: the archive holds the parameters and the optimizer's state tensors themselves, not
// copies, so it must be written before they next change; everything else in it (the module's
// buffers, which a forward changes, counters, options) is a copy taken here. Throws
// CheckpointError naming `path` when torch cannot describe it.
std::unique_ptr<torch::serialize::OutputArchive> training_archive(
    const std::string& path, const TrainingState& state, int world_size,
    const std::vector<torch::Tensor>& rng_states, const std::string& job_id,
    const ModelWriter& write_model = {});

// The bytes of training_archive(...).
std::string encode_training_state(const std::string& path, const TrainingState& state,
                                  int world_size, const std::vector<torch::Tensor>& rng_states,
                                  const std::string& job_id, const ModelWriter& write_model = {});

// Streams `archive` (which must outlive the call) into a checkpoint file
// (write_checkpoint_file); a failure of torch's becomes a CheckpointError naming `path`.
PayloadProducer archive_producer(const std::string& path, torch::serialize::OutputArchive& archive);

class TensorSnapshot;  // state_snapshot.h

// A module's parameters (the tensors themselves, or with `snapshot` copies kept there: Note
// [Snapshot saves]) and copies of its buffers, in the layout of torch::nn::Module::save, which a
// load reads (collect_module in checkpoint_state.cc). `prefix`: the module's path, the keys of
// its copies.
void write_module(torch::serialize::OutputArchive& archive, const torch::nn::Module& module,
                  TensorSnapshot* snapshot = nullptr, const std::string& prefix = "model/");

// Which checkpoints a load resumes (Note [Job identity] in checkpoint.cc).
struct JobCheck {
  std::string job_id;    // the loading job's identity ("" for none)
  bool any_job = false;  // LoadOptions::any_job
};

// Why `job` may not resume a checkpoint written by job `saved_job` ("" for none), or "" when
// it may.
std::string passed_over_because(const std::string& path, const std::string& saved_job,
                                const JobCheck& job);

// A checkpoint the load does not resume, for `why` (another job's, one it cannot read, shards
// without their manifest; Note [Job identity]): with LoadOptions::start_afresh, logged when
// `log` (rank 0 of a group), and the load returns false, so that the job's first save replaces
// it; else CheckpointError, with the ways on.
// `ways` names the two options in the error, for an API whose options are not LoadOptions
// (unset: `options.named_as` followed by any_job and start_afresh).
struct WaysOn {
  const char* resume = nullptr;
  const char* start_afresh = nullptr;
};
void pass_over(const std::string& why, const LoadOptions& options, bool log,
               const WaysOn& ways = {});

// ---- Pieces shared with the sharded checkpoints (src/torch/checkpoint/sharded_checkpoint.cc).

// torch's one-line reason for an exception (a c10::Error without its backtrace).
std::string reason_of(const std::exception& error);

// Runs fn(); anything but a CheckpointError it throws becomes a CheckpointError "<context>:
// <reason><advice>".
template <typename Fn>
void or_checkpoint_error(const std::string& context, const char* advice, Fn&& fn) {
  try {
    fn();
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& error) {
    throw CheckpointError(concat(context, ": ", reason_of(error), advice));
  }
}

// An int64 scalar entry of an archive, and the bytes of a whole archive.
void write_int(torch::serialize::OutputArchive& archive, const std::string& key, int64_t value);
// Throws CheckpointError naming `path` when the archive has no such entry.
int64_t read_int(const std::string& path, torch::serialize::InputArchive& archive,
                 const std::string& key);
std::string to_bytes(torch::serialize::OutputArchive& archive);

// CheckpointError "checkpoint '<path>' does not fit: <what>; load it into the model ...".
[[noreturn]] void throw_mismatch(const std::string& path, const std::string& what);
// CheckpointError "checkpoint '<path>' is not a cohort training checkpoint: <what>; ...".
[[noreturn]] void throw_malformed(const std::string& path, const std::string& what);
// CheckpointError: the checkpoint has no `key` (optimizer, sampler) state but the caller asked
// for it; says to set TrainingState::<key> = nullptr.
[[noreturn]] void throw_missing_section(const std::string& path, const std::string& key);

// What a checkpoint keeps of a DistributedSampler.
struct SamplerRecord {
  int64_t dataset_size = 0;
  int64_t seed = 0;
  bool shuffle = false;
  int64_t epoch = 0;
  int64_t consumed = 0;  // samples of the epoch consumed by all ranks together
};
SamplerRecord sampler_record(const DistributedSampler& sampler);

// Where `sampler` resumes from `saved` (Note [Sampler position at another world size]).
// Throws CheckpointError naming `path` when the data set size, seed or shuffle differ.
struct SamplerPlace {
  uint64_t epoch = 0;
  size_t position = 0;
};
SamplerPlace sampler_place(const std::string& path, const SamplerRecord& saved,
                           const DistributedSampler& sampler);
void restore_sampler(DistributedSampler& sampler, const SamplerPlace& place);

// Throws CheckpointError naming `path` when `saved` is invalid or has another number of param
// groups than `scheduler`'s optimizer.
void check_lr_scheduler_state(const std::string& path, const optim::LrSchedulerState& saved,
                              const optim::WarmupDecayLR& scheduler);
// What a scheduler resumes from a checkpoint that has no scheduler state (Note [Checkpoints
// without a scheduler] in checkpoint_state.cc): the file's step, the scheduler's base LRs.
optim::LrSchedulerState lr_scheduler_fallback(const std::string& path, int64_t saved_step,
                                              const optim::WarmupDecayLR& scheduler);

// `saved` as a generator state this libtorch takes; throws CheckpointError naming `path`.
torch::Tensor check_generator_state(const std::string& path, const torch::Tensor& saved);
// Sets this process's default CPU generator; throws CheckpointError naming `path`.
void set_cpu_generator_state(const std::string& path, const torch::Tensor& state);

// Restores `state` from `payload` as rank `rank` (which picks the generator state: rng/<rank
// mod saved world size>) and returns true; or, when `job` does not let this job resume the
// checkpoint, returns false having changed nothing and sets `passed_over` to why. Everything is
// read and checked before the module is changed; the optimizer is loaded after it. Throws
// CheckpointError naming `path`.
bool decode_training_state(const std::string& path, const std::string& payload, int rank,
                           const JobCheck& job, TrainingState& state, std::string& passed_over);

}  // namespace cohort::detail
