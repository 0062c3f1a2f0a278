#include "checkpointing.h"

#include <CLI/CLI.hpp>
#include <cstdio>

namespace cohort_examples {

void add_checkpoint_flags(CLI::App& app, std::string& path, int64_t& every, bool& resume,
                          bool& overwrite) {
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
