// Sharded checkpoints: every rank writes its own part of the model and optimizer state to a
// directory, rank 0 a manifest, and the checkpoint loads back at any world size into
// ZeroDataParallel (stage 1 or 2), FullyShardedDataParallel (any strategy),
// DistributedDataParallel or one process. And the gathered save: a ZeroDataParallel or
// FullyShardedDataParallel run's full state as one ordinary checkpoint file (checkpoint.h).
//
//   cohort::ZeroDataParallel zero(model, group, options);
//   torch::optim::AdamW optimizer(zero.parameters(), torch::optim::AdamWOptions(1e-3));
//   cohort::TrainingState state;
//   state.module = &zero.module();
//   state.optimizer = &optimizer;
//   state.sampler = &sampler;
//   if (cohort::load_sharded_checkpoint(directory, zero, state, load)) { /* resumed */ }
//   ...
//     if (state.step % 1000 == 0) cohort::save_sharded_checkpoint(directory, zero, state);
//
// The directory holds one file per saving rank, "shard-<rank>-of-<world>.<token>.ckpt" (its
// ranges of every parameter, the optimizer's state for them, its generator state), and
// "manifest.ckpt" (JSON: every parameter and buffer with its shape, dtype and which rank saved
// which range of it; the files with their sizes and CRC-32s; the optimizer's kind and param
// groups; counters, sampler and job). Every file is written as checkpoint.h's are (temporary
// file, fsync, rename, CRC-32 footer), and the manifest last, once every rank's file is on disk:
// a save that did not finish leaves the previous checkpoint loadable, and after it the files
// of earlier saves are removed. What a save and a load assume of file systems, the format and
// every error: docs/checkpoints.md, "Sharded checkpoints".
//
// Every function here but the one-process forms is collective: every rank of the group calls
// it with the same path and the same kinds of state, and every rank returns, or every rank
// throws the same error (no rank is left waiting; every wait has the group's deadline).
// TrainingState's sampler, step, epoch and rng are kept as checkpoint.h keeps them, and
// LoadOptions::any_job decides which job's checkpoints a load resumes, as there.
#pragma once

#include <string>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort {

// ---- ZeroDataParallel and FullyShardedDataParallel: pass the wrapper (or its
// sharded_parameters(), the view these functions take).
//
// ZeroDataParallel (stages 1 and 2). state.module must be &zero.module(), and the
// optimizer (optional) built over zero.parameters() or zero.named_parameters(): SGD, Adam,
// AdamW, Adagrad, RMSprop, cohort::optim::Lars or Lamb (the optimizers whose state is kept per
// element).

// Writes this rank's shards and their optimizer state to `directory` (created if absent), and
// on rank 0 the manifest. Throws InvalidArgument (before anything is written) for a module
// that is not zero's, an optimizer of another kind or holding a tensor that is not one of
// zero's shards; CheckpointError naming the file when one cannot be written (the previous
// checkpoint in `directory` is then left loadable).
void save_sharded_checkpoint(const std::string& directory, const ShardedParameters& sharded,
                             const TrainingState& state);

// Loads a sharded checkpoint saved at any world size, by ZeRO of either stage, FSDP, DDP or
// one process: each rank reads the saved ranges that overlap its shards (and their optimizer
// state), then the parameters are all-gathered whole on every rank. Returns false, changing
// nothing, when `directory` has no manifest (no checkpoint, or a first save that did not
// finish) or holds another job's checkpoint (LoadOptions). Throws CheckpointError naming the
// parameter when the manifest does not match the model (a parameter missing on either side,
// another shape or dtype) or the optimizer (another kind, other param groups), naming the file
// when a shard file is missing, damaged or truncated; InvalidArgument as the save does.
// Everything is read and checked before the model is changed.
bool load_sharded_checkpoint(const std::string& directory, const ShardedParameters& sharded,
                             TrainingState& state, const LoadOptions& options = {});

// The gathered save: every rank's shards and optimizer state are sent to rank 0, which writes
// them, whole, as one ordinary checkpoint file at `path` (checkpoint.h's format and atomic
// write). load_checkpoint loads it into one process or into DDP whose optimizer has the same
// param groups as this one (the same parameters, in the same order). Errors as
// save_sharded_checkpoint's; only rank 0's file system needs `path`.
void save_gathered_checkpoint(const std::string& path, const ShardedParameters& sharded,
                              const TrainingState& state);

// FullyShardedDataParallel, every strategy: the same functions. state.module must be
// &fsdp.module(), and the optimizer (optional) built over fsdp.parameters() or
// fsdp.named_parameters(), of the kinds above. Each rank writes its part of its shards (frozen
// parameters included: FSDP shards them too); under kHybridShard the replicas of a shard on the
// other nodes each write a part of it, so that the checkpoint holds it once; under kNoShard as
// DistributedDataParallel. A load writes into the shards (every replica's under kHybridShard) and
// gathers again any unit gathered at the time (inside full_parameters(), after a forward without
// backward), so that the model never shows the values from before the load. The checkpoints load
// into any of the wrappers here, at any world size, and the gathered save (built from the shards,
// no rank ever holding the whole model but rank 0 while it writes) loads with load_checkpoint.
// Errors as for ZeroDataParallel.

// ---- DistributedDataParallel: the optimizer holds the module's own parameters (as for
// checkpoint.h's group forms). Collective over `group` (pass ddp.group()). A save splits each
// parameter (and its optimizer state) evenly among the ranks' files.
void save_sharded_checkpoint(const std::string& directory, Group& group,
                             const TrainingState& state);
bool load_sharded_checkpoint(const std::string& directory, Group& group, TrainingState& state,
                             const LoadOptions& options = {});

// ---- One process: one file, and a load reads every file of the checkpoint (full tensors).
void save_sharded_checkpoint(const std::string& directory, const TrainingState& state);
bool load_sharded_checkpoint(const std::string& directory, TrainingState& state,
                             const LoadOptions& options = {});

}  // namespace cohort
