// The examples' checkpoint idiom (docs/checkpoints.md): load at every start, save after every
// epoch and where --max-steps stopped a run, in the background unless --sync-checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/async_checkpoint.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/sharded_parameters.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort_examples {

// --checkpoint PATH, --checkpoint-every N, --resume and --overwrite-checkpoint (the last two
// exclusive), --sync-checkpoint.
void add_checkpoint_flags(CLI::App& app, std::string& path, int64_t& every, bool& resume,
                          bool& overwrite, bool& sync);

// How a strategy writes its checkpoints: in the background (cohort::AsyncCheckpointer) unless
// --sync-checkpoint. The checkpointer is made at the first save, which is collective as
// every save is.
class CheckpointWriter {
 public:
  CheckpointWriter(std::shared_ptr<cohort::Group> group, bool background);

  // cohort::save_checkpoint(path, group, state), or its background form.
  void save(const std::string& path, const cohort::TrainingState& state);
  // cohort::save_sharded_checkpoint(directory, sharded, state), or its background form.
  void save_sharded(const std::string& directory, const cohort::ShardedParameters& sharded,
                    const cohort::TrainingState& state);
  // Before the optimizer's step: waits while a background save still reads the parameters.
  void before_update();
  // At the end of the run: waits for the last save (throws its error) and, on rank 0, says
  // how long the saves kept training waiting.
  void finish();

 private:
  cohort::AsyncCheckpointer& checkpointer();
  // Adds the figures of the save that last finished, once.
  void count_last_save();
  // Runs a synchronous save, counting the time it takes.
  template <typename Save>
  void timed(Save&& save);

  std::shared_ptr<cohort::Group> group_;
  bool background_;
  std::unique_ptr<cohort::AsyncCheckpointer> async_;
  int64_t saves_ = 0;
  int64_t counted_ = 0;   // AsyncSaveStats::number of the last save counted
  double save_ms_ = 0;    // summed over the finished saves: the save calls
  double waited_ms_ = 0;  // before_update()
  double written_ms_ = 0;
};

// Whether a checkpoint is due after `step` committed steps with --checkpoint-every `every`.
inline bool checkpoint_due(int64_t every, int64_t step) {
  return every > 0 && step % every == 0;
}

// How the examples load (docs/checkpoints.md, Note [Job identity]): --resume resumes whichever
// checkpoint is at the path; --overwrite-checkpoint starts afresh over one this job did not
// write (or cannot read), which its first save then replaces; neither: a load of another job's
// checkpoint fails, naming both flags.
cohort::LoadOptions load_options(bool resume, bool overwrite);

// A load (load_checkpoint, load_sharded_checkpoint, ...) of a fixed path: whether it loaded.
using LoadFunction = std::function<bool(cohort::TrainingState&, const cohort::LoadOptions&)>;
// A save of a fixed path.
using SaveFunction = std::function<void(const cohort::TrainingState&)>;

// Always loads: a restart by cohortrun resumes this job's own checkpoint; an earlier job's as
// `options` say (load_options). Rank 0 says where it resumed. Nothing happens for an empty
// path. Collective over `group`; returns whether a checkpoint was loaded. `load`: how
// (default: cohort::load_checkpoint(path, group, ...)).
bool resume_from_checkpoint(const std::string& path, const cohort::LoadOptions& options,
                            cohort::Group& group, cohort::TrainingState& state,
                            const LoadFunction& load = {});

// Saves `state` (whose epoch is the one that just ran, counted from 0). The checkpoint of a
// finished epoch resumes at the start of the next one (the sampler is moved on to it); that of
// an epoch cut short (`epoch_finished` false), where it stopped. Nothing happens for an empty
// path. Collective over `group`. `save`: how (default: cohort::save_checkpoint(path, group,
// ...)).
void save_epoch_checkpoint(const std::string& path, cohort::Group& group,
                           const cohort::TrainingState& state, cohort::DistributedSampler& sampler,
                           bool epoch_finished, const SaveFunction& save = {});

}  // namespace cohort_examples
