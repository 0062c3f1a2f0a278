// A TrainingState as the bytes of a torch archive (the payload of a checkpoint file), and back.
//
// Entries of the archive:
//   step, epoch, world_size      int64 scalars (world_size: ranks of the run that saved it)
//   job_id                       uint8: the COHORT_JOB_ID of the job that saved it (when set)
//   model                        nested: torch::nn::Module::save
//   optimizer                    nested: torch::optim::Optimizer::save (when one was given)
//   sampler                      nested: dataset_size, epoch, consumed (when one was given)
//   rng/<r>                      uint8: rank r's default CPU generator state (when rng)
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/torch/checkpoint.h"

namespace cohort::detail {

// This process's default CPU generator state (a uint8 tensor), read under its lock.
torch::Tensor cpu_generator_state();

// Throws InvalidArgument when `state` has no module; `caller` names the function.
void check_training_state(const TrainingState& state, const char* caller);
// The group versions: the optimizer must hold the module's own parameters (not ZeRO shards).
void check_optimizer_holds_module_parameters(const TrainingState& state, const char* caller);

// The identity of the job this process belongs to: COHORT_JOB_ID, "" when unset.
std::string current_job_id();

// The archive of `state` saved by a run of `world_size` ranks of job `job_id` ("" for none);
// rng_states[r] is rank r's generator state (empty unless state.rng). Throws CheckpointError
// naming `path` when torch cannot serialize it.
std::string encode_training_state(const std::string& path, const TrainingState& state,
                                  int world_size, const std::vector<torch::Tensor>& rng_states,
                                  const std::string& job_id);

// Which checkpoints a load resumes (Note [Job identity] in checkpoint.cc).
struct JobCheck {
  std::string job_id;    // the loading job's identity ("" for none)
  bool any_job = false;  // LoadOptions::any_job
};

// Restores `state` from `payload` as rank `rank` (which picks the generator state: rng/<rank
// mod saved world size>) and returns true; or, when `job` does not let this job resume the
// checkpoint, returns false having changed nothing and sets `passed_over` to why. Everything is
// read and checked before the module is changed; the optimizer is loaded after it. Throws
// CheckpointError naming `path`.
bool decode_training_state(const std::string& path, const std::string& payload, int rank,
                           const JobCheck& job, TrainingState& state, std::string& passed_over);

}  // namespace cohort::detail
