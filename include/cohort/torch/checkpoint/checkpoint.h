// Training checkpoints: save everything a run needs to continue (model, optimizer, sampler
// position, counters, random generator) to one file, atomically, and load it back.
//
//   cohort::TrainingState state;
//   state.module = model.get();
//   state.optimizer = &optimizer;
//   state.sampler = &sampler;
//   cohort::LoadOptions load;
//   load.any_job = resume;  // e.g. a --resume flag: go on from an earlier job's checkpoint too
//   if (cohort::load_checkpoint(path, ddp.group(), state, load)) { /* resumed at state.step */ }
//   for (...) {
//     ...
//     ++state.step;
//     if (state.step % 1000 == 0) cohort::save_checkpoint(path, ddp.group(), state);
//   }
//
// A checkpoint records the job that wrote it (COHORT_JOB_ID, which cohortrun sets and keeps
// through restarts), and a load resumes only the loading job's own checkpoints unless asked
// for any (LoadOptions::any_job): so a job restarted by its launcher goes on where it was, and
// a new job does not silently continue, or find finished, an earlier job's run.
//
// The file is written to `<path>.tmp.<pid>` in the same directory, synced, and renamed over
// `path`, so `path` always holds either the previous checkpoint or the new one, whole. A
// footer with a CRC-32 makes a file cut short or damaged anywhere fail to load
// (CheckpointError naming the file) instead of loading garbage. docs/checkpoints.md.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/amp/grad_scaler.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/optim/lr_schedule.h"

namespace cohort {

// A piece of training state beyond those below that a checkpoint keeps (cohort::DiLoCo's outer
// parameters, outer optimizer and schedule; or your own), in a nested torch archive of its own.
class CheckpointPart {
 public:
  virtual ~CheckpointPart() = default;
  // Called on every rank of a save before the part is written (a group save writes rank 0's
  // part only): collective work the part needs done first belongs here. The default does
  // nothing.
  virtual void before_save() {}
  // Writes the part. A background save (async_checkpoint.h) calls it on the caller's thread in
  // save(), and writes the archive later: write copies of what may change before the next
  // AsyncCheckpointer::before_update().
  virtual void save(torch::serialize::OutputArchive& archive) = 0;
  // Reads it back; throws (CheckpointError, InvalidArgument) for a state that does not fit. The
  // parts are loaded last, so a part that throws leaves the rest of the state already restored.
  virtual void load(torch::serialize::InputArchive& archive) = 0;
};

// What a checkpoint holds. The pointers are not owned; null ones (other than module) are not
// saved, and not restored.
struct TrainingState {
  // Parameters and buffers (required). Load copies into the existing tensors, which must have
  // the saved names, shapes and dtypes.
  torch::nn::Module* module = nullptr;
  // Optional: its per-parameter state (momentum buffers, ...) and param-group options (lr, ...).
  torch::optim::Optimizer* optimizer = nullptr;
  // Optional: the epoch and how far into it the ranks are.
  DistributedSampler* sampler = nullptr;
  // The caller's counters, saved and restored as they are.
  int64_t step = 0;
  int64_t epoch = 0;
  // Save and restore torch's default CPU generator (dropout masks, torch::rand, ...).
  bool rng = true;
  // Optional: the loss scale and its growth count (amp/grad_scaler.h), so that a resumed
  // float16 run goes on with the scale it had reached.
  amp::GradScaler* grad_scaler = nullptr;
  // Optional: the learning-rate scheduler's step count and base LRs (optim/lr_schedule.h), so
  // that a resumed run goes on with the LR the uninterrupted run would have used. A checkpoint
  // written without them (by an earlier cohort) still loads: the scheduler then goes on at the
  // file's `step` (the caller's counter, which a loop that steps both together keeps equal to
  // the scheduler's count) with the base LRs it was made with.
  optim::WarmupDecayLR* lr_scheduler = nullptr;
  // Named parts (CheckpointPart), saved under "parts/<name>" and restored, after everything
  // above, into the parts of the same names, which the file must have. The one-file checkpoints
  // only (the sharded ones refuse parts with InvalidArgument). Names must be unique.
  std::vector<std::pair<std::string, CheckpointPart*>> parts = {};
};

// Which checkpoint a load resumes.
struct LoadOptions {
  // false: only one this job wrote (the same non-empty COHORT_JOB_ID). true: whichever
  // checkpoint is at the path.
  bool any_job = false;
  // What a load does with a checkpoint at the path that it does not resume: another job's (or,
  // in a process without a job id, any), one it cannot read (corrupt, truncated, unreadable),
  // or a sharded directory whose shards have no manifest. false: throws CheckpointError saying
  // so and naming the ways on, and changes nothing, so that a fresh start never replaces
  // another run's work by accident. true: returns false with a warning, and the job's first
  // save replaces it. A checkpoint this job wrote (a restart's) is resumed either way.
  bool start_afresh = false;
  // How the caller's users spell these options, for the error that names the ways on: an API
  // that takes a LoadOptions as one of its own options names it so (ElasticTrainer:
  // "ElasticTrainerOptions::resume.", so the error says "ElasticTrainerOptions::resume.any_job").
  const char* named_as = "LoadOptions::";
};

// The file is a torch archive followed by this footer, written last:
//   magic "COHORTCK" (8 bytes) | format version u32 | archive bytes u64 | CRC-32 of them u32
// (integers little-endian).
inline constexpr size_t kCheckpointFooterBytes = 24;

// ---- One process.

// Writes `state` to `path` atomically. Throws CheckpointError (naming `path`) when the file
// cannot be written; the previous file at `path` is then left as it was.
void save_checkpoint(const std::string& path, const TrainingState& state);

// Restores `state` from `path`. Returns false, changing nothing, when there is no file at
// `path` (a first run), or with LoadOptions::start_afresh when the file is another job's or
// cannot be read. Throws CheckpointError naming `path` when the file is another job's or cannot
// be read (without start_afresh), is corrupt or truncated, or does not fit the module,
// optimizer or sampler. The module is checked whole before any of it is changed; a later failure
// (the optimizer's state) may leave the module restored and the rest not.
bool load_checkpoint(const std::string& path, TrainingState& state,
                     const LoadOptions& options = {});

// ---- Data parallel: collective over `group` (every rank calls it, with the same path and the
// same kinds of state; pass ddp.group()).

// Rank 0 writes the file (only its file system needs `path`); every rank contributes its
// random generator state. Every rank returns, or every rank throws rank 0's CheckpointError.
void save_checkpoint(const std::string& path, Group& group, const TrainingState& state);

// Rank 0 reads and verifies the file and sends it to the others, so no shared file system is
// needed; rank 0's job id and `options` decide whether it is resumed. Every rank returns false
// (no file, or another job's), or every rank restores the same state, or every
// rank throws CheckpointError. Works at any world size: the model and optimizer are the same
// on every rank of a data-parallel run, so the saved copy is every rank's. At a different world
// size the sampler resumes at (samples consumed by all ranks) / (new world size), rounded down,
// so a few samples of the epoch may be seen again; rank r restores the generator state saved
// by rank r mod (saved world size).
bool load_checkpoint(const std::string& path, Group& group, TrainingState& state,
                     const LoadOptions& options = {});

}  // namespace cohort
