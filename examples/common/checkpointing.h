// The examples' checkpoint idiom (docs/checkpoints.md): load at every start, save after every
// epoch and where --max-steps stopped a run, in the background unless --sync-checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/strategy/strategy.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort_examples {

// --checkpoint PATH, --checkpoint-every N, --resume and --overwrite-checkpoint (the last two
// exclusive), --sync-checkpoint.
void add_checkpoint_flags(CLI::App& app, std::string& path, int64_t& every, bool& resume,
                          bool& overwrite, bool& sync);

// Whether a checkpoint is due after `step` committed steps with --checkpoint-every `every`.
inline bool checkpoint_due(int64_t every, int64_t step) {
  return every > 0 && step % every == 0;
}

// How the examples load (docs/checkpoints.md, Note [Job identity]): --resume resumes whichever
// checkpoint is at the path; --overwrite-checkpoint starts afresh over one this job did not
// write (or cannot read), which its first save then replaces; neither: a load of another job's
// checkpoint fails, naming both flags.
cohort::LoadOptions load_options(bool resume, bool overwrite);

// Always loads, through the strategy (one file or a sharded directory): a restart by
// cohortrun resumes this job's own checkpoint; an earlier job's as `options` say
// (load_options). Rank 0 says where it resumed. Nothing happens for an empty path. Collective;
// returns whether a checkpoint was loaded.
bool resume_from_checkpoint(const std::string& path, const cohort::LoadOptions& options,
                            cohort::Strategy& strategy, cohort::TrainingState& state);

// Saves `state` (whose epoch is the one that just ran, counted from 0) through the strategy.
// The checkpoint of a finished epoch resumes at the start of the next one (the sampler is moved
// on to it); that of an epoch cut short (`epoch_finished` false), where it stopped. Nothing
// happens for an empty path. Collective.
void save_epoch_checkpoint(const std::string& path, cohort::Strategy& strategy,
                           const cohort::TrainingState& state, cohort::DistributedSampler& sampler,
                           bool epoch_finished);

// At the end of the run: waits for a checkpoint still being written (throws its error) and, on
// rank 0, says how long the saves kept training waiting. Collective.
void finish_checkpoints(cohort::Strategy& strategy);

}  // namespace cohort_examples
