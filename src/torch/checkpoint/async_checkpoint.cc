// cohort::AsyncCheckpointer (include/cohort/torch/checkpoint/async_checkpoint.h).
//
// Note [Asynchronous saves]
// A save is a synchronous save cut in two (prepared_save.h):
//  - On the caller's thread, prepare_*() does everything that needs the training state or
//    `group`: the checks, the collectives (generator states, the sharded save's agreement and
//    token), the copies of what changes before the next update (buffers, counters, sampler,
//    learning rates, generators: Note [Archives of live tensors]), and the archive, which
//    holds the parameters and optimizer state by reference. This is cheap: no tensor data is
//    copied but the buffers'.
//  - On a thread of its own (BackgroundSave), finish_*() streams the archive into the
//    temporary file. write() copies each piece into the kernel's page cache, and that copy is
//    the staging: once the payload is in the file, the save no longer reads the training
//    state and before_update() returns. No user-space copy of the state is made, so the
//    memory a save adds is the archive's bookkeeping and the buffers' copies (bench/
//    async_checkpoint.py measures it). The thread then syncs and renames the file, and runs
//    the rest of the save's collectives (the outcome, the sharded save's table and manifest)
//    over a group of its own, split from the caller's when the checkpointer was made, so that
//    they never interleave with training's collectives on the caller's group.
// What keeps the file from mixing two steps: the caller's before_update() before the update.
// As a check of that contract, each parameter's (or shard's) version counter is taken when the
// save starts and compared once the payload is written; an update that ran (an in-place
// change bumps the counter) fails the save, which removes its temporary file, so that the
// previous checkpoint stays. (An update racing with the last bytes may escape the check: it
// catches a missing before_update(), it does not replace it.)
// Outcomes reach the caller at the next save(), save_sharded() or wait(), on every rank the
// same (the background collectives decide them), so that every rank throws at the same call.
// With AsyncCheckpointOptions::staging_bytes (the default), a save's archive is built over
// copies of the parameters and of the optimizer's state (Note [Snapshot saves] in
// state_snapshot.h), which the writer makes first (Note [Deferred staging]): once they are
// made it reads nothing of the training state and before_update() no longer waits; the
// version check then covers every copied tensor. States the snapshot cannot take are saved as
// above.
#include "cohort/torch/checkpoint/async_checkpoint.h"

#include <torch/cuda.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "call_sites.h"
#include "checkpoint/background_save.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/prepared_save.h"
#include "checkpoint/state_snapshot.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/core/check.h"
#include "cohort/core/env.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"
#include "rank_holdings.h"

namespace cohort {
namespace {

using Clock = std::chrono::steady_clock;
using detail::BackgroundSave;
using detail::concat;

constexpr CallSite kSite = call_sites::kAsyncCheckpoint;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The writer reads the tensors on its own thread, outside the caller's CUDA stream order: a
// save of device tensors waits for the work queued so far (the last update, the buffers'
// copies) before the writer starts.
void synchronize_devices(const std::vector<detail::ReadTensor>& reads) {
  for (const detail::ReadTensor& read : reads) {
    if (!read.tensor.is_cuda()) continue;
    torch::cuda::synchronize();
    return;
  }
}

std::vector<detail::ReadTensor> module_tensors(const torch::nn::Module& module) {
  std::vector<detail::ReadTensor> out;
  for (const auto& item : module.named_parameters()) out.push_back({item.key(), item.value(), 0});
  return out;
}

// COHORT_CHECKPOINT_STAGING_MIB, where set, replaces AsyncCheckpointOptions::staging_bytes
// (docs/env.md): to compare staged and unstaged saves without a rebuild.
void apply_staging_override(AsyncCheckpointOptions& options) {
  const std::optional<int64_t> mib = env_int("COHORT_CHECKPOINT_STAGING_MIB");
  if (!mib) return;
  if (*mib < 0) {
    throw ConfigError(
        concat("COHORT_CHECKPOINT_STAGING_MIB must be 0 (no staging) or a positive "
               "number of MiB, got ",
               *mib));
  }
  options.staging_bytes = static_cast<uint64_t>(*mib) << 20;
}

// A staged save's first work on the writer thread: the copies save() left to it (Note
// [Deferred staging] in state_snapshot.h; only a staged save has any), after which it reads
// nothing of the training state. Their error (an update that ran too early) becomes the
// save's, which finish reports on every rank.
void stage(const detail::PendingCopies& pending, const std::string& what, std::exception_ptr& error,
           const std::function<void()>& staged) {
  if (pending.empty()) return;
  try {
    pending.fill(what);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  staged();
}

// The hooks of a prepared save's write; they run inside the job, which owns the save, so they
// may refer to its path and reads.
template <typename Prepared>
detail::FileWriteHooks hooks_for(const Prepared& save, const std::string& path,
                                 const AsyncCheckpointOptions& options,
                                 const std::function<void()>& staged) {
  detail::FileWriteHooks hooks;
  hooks.on_progress = options.on_progress;
  hooks.on_payload_written = [&save, &path, staged] {
    if (!save.staged) detail::check_unchanged(path, save.reads);  // copies cannot change
    staged();
  };
  return hooks;
}

}  // namespace

class AsyncCheckpointer::Impl {
 public:
  Impl(Group* group, AsyncCheckpointOptions options)
      : group_(group), options_(std::move(options)) {
    COHORT_CHECK(options_.timeout.count() > 0,
                 "AsyncCheckpointOptions::timeout must be positive, got ", options_.timeout.count(),
                 " ms");
    apply_staging_override(options_);
    if (group_ != nullptr) {
      CollectiveOptions split;
      split.site = kSite;
      background_group_ = group_->split(0, group_->rank(), split);
    } else {
      own_group_ = Group::create_inproc(std::make_shared<InprocFabric>(1), 0);
    }
  }

  ~Impl() {
    if (!current_) return;
    current_->raise_priority();
    if (!current_->wait_finished(Clock::now() + options_.timeout)) {
      COHORT_LOG(kError, "the asynchronous save of '", current_what_, "' is still running after ",
                 options_.timeout.count(), " ms; it is left to finish on its own (the previous "
                 "checkpoint stays until its rename)");
      return;
    }
    if (const std::exception_ptr error = current_->error()) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        COHORT_LOG(kError, "the last asynchronous save failed and nothing reported it: ",
                   e.what());
      }
    }
  }

  bool save(const std::string& path, const TrainingState& state) {
    const Clock::time_point start = Clock::now();
    if (!settle_previous(path)) return false;
    auto save = std::make_shared<detail::PreparedFileSave>(detail::prepare_file_save(
        path, group_, state, options_.staging_bytes > 0 ? &snapshot_ : nullptr,
        options_.staging_bytes));
    // Staged, the copies are what the writer reads: queued on the device like the update.
    synchronize_devices(save->staged ? module_tensors(*state.module) : save->reads);
    auto pending = std::make_shared<detail::PendingCopies>(snapshot_.take_pending());
    const bool reads_nothing = (save->archive == nullptr || save->staged) && pending->empty();
    launch(path, start, reads_nothing,
           [save, pending, options = options_,
            group = background_group_](const std::function<void()>& staged) {
             stage(*pending, save->path, save->error, staged);
             detail::finish_file_save(*save, group.get(),
                                      hooks_for(*save, save->path, options, staged), kSite);
           });
    return true;
  }

  bool save_sharded(const std::string& directory, Group& group, detail::RankHoldings holdings,
                    const TrainingState& state, const torch::nn::Module* expected_module) {
    Group& background = background_group_ ? *background_group_ : *own_group_;
    COHORT_CHECK(group.size() == background.size() && group.rank() == background.rank(),
                 "AsyncCheckpointer::save_sharded: the checkpointer was made over a group of ",
                 background.size(), " ranks (this one rank ", background.rank(),
                 ") but the wrapper's group has ", group.size(), " (rank ", group.rank(),
                 "); make the checkpointer over the wrapper's group");
    const Clock::time_point start = Clock::now();
    if (!settle_previous(directory)) return false;
    auto save = std::make_shared<detail::PreparedShardedSave>(detail::prepare_sharded_save(
        directory, group, std::move(holdings), state, expected_module,
        options_.staging_bytes > 0 ? &snapshot_ : nullptr, options_.staging_bytes));
    // Staged, the copies of the shards are queued on their devices like the update.
    synchronize_devices(save->reads);
    auto pending = std::make_shared<detail::PendingCopies>(snapshot_.take_pending());
    launch(directory, start, /*reads_nothing=*/save->staged && pending->empty(),
           [save, pending, options = options_,
            background = background_group_ ? background_group_
                                           : own_group_](const std::function<void()>& staged) {
             stage(*pending, save->directory, save->error, staged);
             detail::finish_sharded_save(*save, *background,
                                         hooks_for(*save, save->directory, options, staged),
                                         kSite);
           });
    return true;
  }

  // The group a save's collectives run on, on the caller's thread: the caller's, or for one
  // process a group of one (whose saves run one after the other, so that the background's
  // collectives never overlap the next save's).
  Group& group() const { return group_ ? *group_ : *own_group_; }

  void before_update() {
    if (!current_ || current_->staged()) return;
    const Clock::time_point start = Clock::now();
    current_->raise_priority();  // training now waits for it: no more waiting for idle CPU
    if (!current_->wait_staged(start + options_.timeout)) {
      throw TimeoutError(concat("AsyncCheckpointer::before_update(): the asynchronous save of '",
                                current_what_, "' still reads the training state after ",
                                options_.timeout.count(),
                                " ms (AsyncCheckpointOptions::timeout); is the disk stalled?"));
    }
    waited_ms_ += ms_since(start);
  }

  void wait() {
    if (!current_) return;
    const Clock::time_point start = Clock::now();
    current_->raise_priority();
    if (!current_->wait_finished(start + options_.timeout)) {
      throw TimeoutError(concat("AsyncCheckpointer: the asynchronous save of '", current_what_,
                                "' has not finished after ", options_.timeout.count(),
                                " ms (AsyncCheckpointOptions::timeout); is the disk stalled?"));
    }
    last_.staged_ms = current_->staged_ms();
    last_.written_ms = current_->finished_ms();
    last_.staging_memory = snapshot_.held_bytes();
    last_.waited_ms = waited_ms_;
    last_.save_ms = save_ms_;
    last_.number = started_;
    const std::exception_ptr error = current_->error();
    current_.reset();
    if (error) std::rethrow_exception(error);
  }

  bool in_flight() const { return current_ && !current_->finished(); }
  AsyncSaveStats last_save() const { return last_; }

 private:
  // The previous save: waited for (its error thrown), or, under IfBusy::kSkip while it is still
  // being written on any rank, the reason this save is skipped (returns false).
  bool settle_previous(const std::string& path) {
    if (options_.if_busy == AsyncCheckpointOptions::IfBusy::kSkip && busy_on_any_rank()) {
      COHORT_LOG(kInfo, "asynchronous checkpoint '", path, "' skipped: the save of '",
                 current_what_, "' is still being written (AsyncCheckpointOptions::if_busy)");
      return false;
    }
    wait();
    return true;
  }

  bool busy_on_any_rank() {
    int64_t busy = in_flight() ? 1 : 0;
    if (group_ != nullptr) {
      CollectiveOptions options;
      options.op = ReduceOp::kMax;
      options.site = kSite;
      group_->allreduce(make_buffer(&busy, 1), options);
    }
    return busy != 0;
  }

  void launch(const std::string& what, Clock::time_point start, bool reads_nothing,
              BackgroundSave::Job job) {
    current_what_ = what;
    waited_ms_ = 0;
    save_ms_ = ms_since(start);
    ++started_;
    current_ = std::make_unique<BackgroundSave>(std::move(job), reads_nothing,
                                                options_.idle_priority);
  }

  Group* group_;
  AsyncCheckpointOptions options_;
  std::shared_ptr<Group> background_group_;  // null for one process
  std::shared_ptr<Group> own_group_;         // one process only
  detail::TensorSnapshot snapshot_;          // the copies staged saves write, kept between saves
  std::unique_ptr<BackgroundSave> current_;
  std::string current_what_;
  double waited_ms_ = 0;
  double save_ms_ = 0;
  int64_t started_ = 0;  // saves launched
  AsyncSaveStats last_;
};

AsyncCheckpointer::AsyncCheckpointer(AsyncCheckpointOptions options)
    : impl_(std::make_unique<Impl>(nullptr, std::move(options))) {}

AsyncCheckpointer::AsyncCheckpointer(Group& group, AsyncCheckpointOptions options)
    : impl_(std::make_unique<Impl>(&group, std::move(options))) {}

AsyncCheckpointer::~AsyncCheckpointer() = default;

bool AsyncCheckpointer::save(const std::string& path, const TrainingState& state) {
  return impl_->save(path, state);
}

bool AsyncCheckpointer::save_sharded(const std::string& directory,
                                     const ShardedParameters& sharded,
                                     const TrainingState& state) {
  return impl_->save_sharded(directory, *sharded.group, sharded.holdings(), state,
                             sharded.module);
}

bool AsyncCheckpointer::save_sharded(const std::string& directory, const TrainingState& state) {
  detail::check_training_state(state, "save_sharded_checkpoint");
  Group& group = impl_->group();
  return impl_->save_sharded(directory, group,
                             detail::replicated_holdings(*state.module, group.rank(), group.size()),
                             state, nullptr);
}

void AsyncCheckpointer::before_update() {
  impl_->before_update();
}

void AsyncCheckpointer::wait() {
  impl_->wait();
}

bool AsyncCheckpointer::in_flight() const {
  return impl_->in_flight();
}

AsyncSaveStats AsyncCheckpointer::last_save() const {
  return impl_->last_save();
}

}  // namespace cohort
