// The examples' checkpoint idiom (docs/checkpoints.md): load at every start, save after every
// epoch and where --max-steps stopped a run.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cohort/comm/group.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort_examples {

// --checkpoint PATH, --checkpoint-every N, --resume and --overwrite-checkpoint (the last two
// exclusive).
void add_checkpoint_flags(CLI::App& app, std::string& path, int64_t& every, bool& resume,
                          bool& overwrite);

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
