#include "checkpointing.h"

#include <cstdio>

namespace cohort_examples {

bool resume_from_checkpoint(const std::string& path, bool any_job, cohort::Group& group,
                            cohort::TrainingState& state, const LoadFunction& load) {
  if (path.empty()) return false;
  cohort::LoadOptions options;
  options.any_job = any_job;
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
