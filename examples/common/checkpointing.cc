#include "checkpointing.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <utility>

#include "cohort/torch/checkpoint/sharded_checkpoint.h"

namespace cohort_examples {

void add_checkpoint_flags(CLI::App& app, std::string& path, int64_t& every, bool& resume,
                          bool& overwrite, bool& sync) {
  app.add_option("--checkpoint", path,
                 "Checkpoint written after each epoch ('' for none); under --elastic a directory, "
                 "written at the end");
  app.add_option("--checkpoint-every", every,
                 "Also write --checkpoint every N steps, so that a restart loses fewer (0: never)")
      ->check(CLI::NonNegativeNumber);
  auto* resume_flag = app.add_flag(
      "--resume", resume,
      "Continue from --checkpoint when it exists, even when an earlier job wrote it (a restart "
      "by cohortrun resumes its own job's checkpoint without it)");
  app.add_flag("--overwrite-checkpoint", overwrite,
               "Start afresh even when --checkpoint holds an earlier job's checkpoint (or one "
               "that cannot be read), which the first save then replaces; without it or "
               "--resume such a start is refused")
      ->excludes(resume_flag);
  app.add_flag("--sync-checkpoint", sync,
               "Write each checkpoint before training goes on (default: in the background, "
               "training waiting only while the save still reads the parameters)");
}

CheckpointWriter::CheckpointWriter(std::shared_ptr<cohort::Group> group, bool background)
    : group_(std::move(group)), background_(background) {}

cohort::AsyncCheckpointer& CheckpointWriter::checkpointer() {
  if (!async_) async_ = std::make_unique<cohort::AsyncCheckpointer>(*group_);
  return *async_;
}

void CheckpointWriter::save(const std::string& path, const cohort::TrainingState& state) {
  if (!background_) {
    timed([&] { cohort::save_checkpoint(path, *group_, state); });
    return;
  }
  checkpointer().save(path, state);
  count_last_save();
}

void CheckpointWriter::save_sharded(const std::string& directory,
                                    const cohort::ShardedParameters& sharded,
                                    const cohort::TrainingState& state) {
  if (!background_) {
    timed([&] { cohort::save_sharded_checkpoint(directory, sharded, state); });
    return;
  }
  checkpointer().save_sharded(directory, sharded, state);
  count_last_save();
}

void CheckpointWriter::count_last_save() {
  const cohort::AsyncSaveStats last = async_->last_save();
  if (last.number == counted_) return;  // none finished since the last count
  counted_ = last.number;
  ++saves_;
  save_ms_ += last.save_ms;
  waited_ms_ += last.waited_ms;
  written_ms_ += last.written_ms;
}

void CheckpointWriter::before_update() {
  if (async_) async_->before_update();
}

template <typename Save>
void CheckpointWriter::timed(Save&& save) {
  const auto start = std::chrono::steady_clock::now();
  save();
  ++saves_;
  save_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void CheckpointWriter::finish() {
  if (async_) {
    async_->wait();
    count_last_save();
  }
  if (group_->rank() != 0 || saves_ == 0) return;
  if (background_) {
    std::printf(
        "checkpoints: %lld written in the background in %.1f ms each; training spent "
        "%.1f ms in the save calls and waited %.1f ms before its updates\n",
        (long long)saves_, written_ms_ / saves_, save_ms_, waited_ms_);
  } else {
    std::printf(
        "checkpoints: %lld written synchronously; training spent %.1f ms in the save "
        "calls\n",
        (long long)saves_, save_ms_);
  }
}

cohort::LoadOptions load_options(bool resume, bool overwrite) {
  cohort::LoadOptions options;
  options.any_job = resume;
  options.start_afresh = overwrite;
  return options;
}

bool resume_from_checkpoint(const std::string& path, const cohort::LoadOptions& options,
                            cohort::Group& group, cohort::TrainingState& state,
                            const LoadFunction& load) {
  if (path.empty()) return false;
  const bool loaded =
      load ? load(state, options) : cohort::load_checkpoint(path, group, state, options);
  if (!loaded) return false;
  if (group.rank() == 0) {
    std::printf("resumed from %s at epoch %lld, step %lld\n", path.c_str(),
                (long long)state.epoch + 1, (long long)state.step);
  }
  return true;
}

void save_epoch_checkpoint(const std::string& path, cohort::Group& group,
                           const cohort::TrainingState& state, cohort::DistributedSampler& sampler,
                           bool epoch_finished, const SaveFunction& save) {
  if (path.empty()) return;
  cohort::TrainingState saved = state;
  if (epoch_finished) {
    sampler.set_epoch(static_cast<uint64_t>(state.epoch + 1));
    saved.epoch = state.epoch + 1;
  }
  if (save) {
    save(saved);
  } else {
    cohort::save_checkpoint(path, group, saved);
  }
}

}  // namespace cohort_examples
