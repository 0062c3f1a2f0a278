// The checkpoints ElasticTrainer writes every ElasticTrainerOptions::checkpoint_every steps,
// resumes from at a job's start, and (sharded strategies) resumes from when a change loses
// shards that no survivor holds (buddy copies off, or a member lost with its buddy).
// - kDdp, with or without DiLoCo (whose DiLoCo is a part, "diloco"): rank 0 alone writes one file,
// "<directory>/replica.ckpt" (save_checkpoint of one
//   process: the model, the optimizer and the committed steps), since every member holds the
//   same state; at a start rank 0 alone loads it and heals the others from it.
// - sharded: a sharded checkpoint (save_sharded_checkpoint, collective), same contents.
// The elastic sampler's place (epoch, position, skipped; then the generation and world size
// that wrote it, for people) is written beside either by rank 0 as "elastic-<step>.txt", before
// the checkpoint itself, so that a checkpoint of step N never exists without it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/elastic_sampler.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort::detail {

// kDdp, on rank 0 only (not collective).
void save_replica_checkpoint(const std::string& directory, torch::nn::Module& module,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler, const Membership& membership,
                             const std::vector<std::pair<std::string, CheckpointPart*>>& parts);

// kDdp, on this process only: the committed steps of the checkpoint loaded (model, optimizer,
// sampler), or nullopt when `directory` holds none (or `options` leave it). A sharded
// strategy's checkpoint there is read whole (load_sharded_checkpoint's one-process form), unless
// the job has `parts` (DiLoCo), which it lacks: CheckpointError. Throws CheckpointError as
// load_checkpoint does, ElasticError when the sampler's file is missing.
std::optional<int64_t> load_replica_checkpoint(
    const std::string& directory, torch::nn::Module& module, torch::optim::Optimizer& optimizer,
    ElasticSampler& sampler, const LoadOptions& options,
    std::vector<std::pair<std::string, CheckpointPart*>> parts);

// Collective over view.group.
void save_elastic_checkpoint(const std::string& directory, const ShardedParameters& view,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler, const Membership& membership);

// The committed steps of the checkpoint loaded (model, optimizer, sampler), or nullopt when
// `directory` holds none (or `options` leave it). Collective over view.group; throws
// ElasticError when the sampler's file of the checkpoint's step is missing, CheckpointError on
// every member when `directory` holds a kDdp job's checkpoint (not re-sliced into shards).
std::optional<int64_t> load_elastic_checkpoint(const std::string& directory,
                                               const ShardedParameters& view,
                                               torch::optim::Optimizer& optimizer,
                                               ElasticSampler& sampler, const LoadOptions& options);

}  // namespace cohort::detail
