#include "checkpointing.h"

#include <CLI/CLI.hpp>
#include <cstdio>

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

cohort::LoadOptions load_options(bool resume, bool overwrite) {
  cohort::LoadOptions options;
  options.any_job = resume;
  options.start_afresh = overwrite;
  return options;
}

bool resume_from_checkpoint(const std::string& path, const cohort::LoadOptions& options,
                            cohort::Strategy& strategy, cohort::TrainingState& state) {
  if (path.empty() || !strategy.load(path, state, options)) return false;
  if (strategy.group().rank() == 0) {
    std::printf("resumed from %s at epoch %lld, step %lld\n", path.c_str(),
                (long long)state.epoch + 1, (long long)state.step);
  }
  return true;
}

void save_epoch_checkpoint(const std::string& path, cohort::Strategy& strategy,
                           const cohort::TrainingState& state, cohort::DistributedSampler& sampler,
                           bool epoch_finished) {
  if (path.empty()) return;
  cohort::TrainingState saved = state;
  if (epoch_finished) {
    sampler.set_epoch(static_cast<uint64_t>(state.epoch + 1));
    saved.epoch = state.epoch + 1;
  }
  strategy.save(path, saved);
}

void finish_checkpoints(cohort::Strategy& strategy) {
  strategy.finish_checkpoints();
  const cohort::CheckpointWriterStats s = strategy.checkpoint_stats();
  if (strategy.group().rank() != 0 || s.saves == 0) return;
  if (s.background) {
    std::printf(
        "checkpoints: %lld written in the background in %.1f ms each; training spent "
        "%.1f ms in the save calls and waited %.1f ms before its updates\n",
        (long long)s.saves, s.written_ms / s.saves, s.save_ms, s.waited_ms);
  } else {
    std::printf(
        "checkpoints: %lld written synchronously; training spent %.1f ms in the save "
        "calls\n",
        (long long)s.saves, s.save_ms);
  }
}

}  // namespace cohort_examples
