// Asynchronous checkpoints: a save that returns once it has taken what training is about to
// change, and writes the file on a background thread while training goes on.
//
//   cohort::AsyncCheckpointer checkpointer(ddp.group());  // collective, like the saves
//   for (...) {
//     loss.backward();
//     checkpointer.before_update();  // waits only while a save still reads the parameters
//     optimizer.step();
//     ++state.step;
//     if (state.step % 1000 == 0) checkpointer.save(path, state);
//   }
//   checkpointer.wait();  // the last save is on disk, or its error is thrown here
//
// What a save writes is checkpoint.h's file (or sharded_checkpoint.h's directory), loaded by
// the same load functions. Note [Asynchronous saves] in async_checkpoint.cc says how it works:
// - A save copies what changes before the next update (buffers, counters, sampler position,
//   learning rates, generator states) and returns; the background thread first copies the
//   parameters and the optimizer's state into memory of the checkpointer's own (the staging,
//   AsyncCheckpointOptions::staging_bytes; Notes [Snapshot saves] and [Deferred staging])
//   while training runs its forward and backward: training waits, in before_update(), at most
//   for what is left of a memory copy, not for torch's serializer or the disk.
// - A background thread serializes the file from those copies, checksums it, syncs it and
//   renames it into place, as a synchronous save does: a crash at any moment leaves the
//   previous checkpoint loadable.
// - before_update() must come before anything changes the parameters or the optimizer's state
//   (optimizer.step(), GradScaler::step, a model averager). After a staged save it waits for
//   the copies not yet made (an update before it fails the save by name, as below). A save that
//   is not staged (staging_bytes = 0, a state larger than it, an optimizer
//   whose state cohort cannot list, checkpoint parts, and the sharded saves) keeps the
//   parameters and optimizer state by reference: before_update() then waits until the
//   background thread has read them, and, as a check, a save that finds a module parameter (or
//   a shard) changed while it read it is abandoned with a CheckpointError naming it; the
//   optimizer's state and the parts are not checked.
// - A save's error (a full disk, a permission) is thrown by the next call of save(),
//   save_sharded() or wait() (on every rank, the same error), and logged by the destructor
//   when nothing reported it. docs/checkpoints.md, "Asynchronous saves".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort {

struct AsyncCheckpointOptions {
  // What a save does while the previous one is still being written.
  enum class IfBusy {
    kWait,  // waits for it to finish (and throws its error), then saves
    kSkip,  // saves nothing and returns false; the ranks agree, so all skip or none
  };
  IfBusy if_busy = IfBusy::kWait;
  // The longest any wait of the checkpointer lasts (before_update(), wait(), a save waiting
  // for the previous one) before it throws TimeoutError; a positive duration.
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Called on the writing thread after each piece of a file is written, with the payload bytes
  // written so far (for progress reports; it must not call the checkpointer).
  std::function<void(uint64_t bytes)> on_progress;
  // The writing thread runs at the lowest CPU priority (Linux SCHED_IDLE): it takes only the
  // CPU time training leaves idle, so it does not slow a step down. When before_update() or
  // wait() has to wait for it, it is put back at the normal priority and writes what is left
  // while training waits. False: at the caller's priority from the start, sharing the cores
  // with training (faster to disk where cores are free, slower steps where they are not).
  bool idle_priority = true;
  // The most memory a save's copies may take (Note [Snapshot saves] in state_snapshot.h): the
  // parameters and the optimizer's state tensors, copied into tensors the checkpointer keeps
  // for the next save (on the tensors' own device; by the writer thread for host memory). A state
  // larger than this is saved unstaged (above). 0: never staged, no memory added. The environment
  // variable COHORT_CHECKPOINT_STAGING_MIB, where set, replaces it.
  uint64_t staging_bytes = uint64_t{4} << 30;
};

// What the last save that finished did (AsyncCheckpointer::last_save()).
struct AsyncSaveStats {
  int64_t number = 0;     // which save of the checkpointer this was: 1, 2, ... (0: none yet)
  double save_ms = 0;     // the save() call: checks, collectives, copies (a GPU's tensors'),
                          // and waiting for the save before it (IfBusy::kWait)
  double staged_ms = 0;   // from the start until before_update() would no longer wait
  double written_ms = 0;  // from the start until the file was synced and renamed into place
  double waited_ms = 0;   // how long before_update() waited on it
  uint64_t staging_memory = 0;  // bytes of copies the checkpointer keeps (0: none staged)
};

class AsyncCheckpointer {
 public:
  // For one process: saves with checkpoint.h's save_checkpoint(path, state) semantics.
  explicit AsyncCheckpointer(AsyncCheckpointOptions options = {});
  // Collective over `group` (pass ddp.group(), or the sharded wrapper's group): makes a group
  // of the same ranks for the background thread's collectives (Group::split), so that they
  // never interleave with training's. Every save is collective over `group` as well.
  explicit AsyncCheckpointer(Group& group, AsyncCheckpointOptions options = {});
  // Waits for a save in flight (at most the timeout); logs its error when none reported it.
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // save_checkpoint(path, [group,] state), in the background. Returns true once the save is
  // under way; false when IfBusy::kSkip skipped it. Throws the previous save's error (which
  // that save was), and, before anything is started, what the synchronous save throws for its
  // arguments.
  bool save(const std::string& path, const TrainingState& state);

  // save_sharded_checkpoint(directory, sharded, state), in the background: every rank streams
  // its own shard file; rank 0 writes the manifest once every rank's file is on disk. The
  // checkpointer must have been made over the wrapper's group (or a group of the same ranks).
  bool save_sharded(const std::string& directory, const ShardedParameters& sharded,
                    const TrainingState& state);
  // save_sharded_checkpoint(directory, group, state) (DDP, over the checkpointer's group) or,
  // for a one-process checkpointer, save_sharded_checkpoint(directory, state).
  bool save_sharded(const std::string& directory, const TrainingState& state);

  // Returns once no save in flight still reads the parameters or the optimizer's state: call it
  // before changing them. Returns at once when none does; does not throw a save's error (the
  // next save() or wait() does, on every rank at the same point).
  void before_update();

  // Waits until the save in flight (if any) is on disk and throws its error, if it failed.
  void wait();

  // Whether a save is still being written.
  bool in_flight() const;

  // The figures of the last save that finished (zeros before one has).
  AsyncSaveStats last_save() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
