// The sharded checkpoints ElasticTrainer writes every ElasticTrainerOptions::checkpoint_every
// steps and resumes from when a change loses shards that no survivor holds (buddy copies off,
// or a member lost with its buddy). A sharded checkpoint (save_sharded_checkpoint) holds the
// model, the optimizer and the committed steps; the elastic sampler's place (epoch, position,
// skipped) is written beside it by rank 0 as "elastic-<step>.txt", before the checkpoint's
// manifest, so that the manifest of step N never exists without it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/torch/data/elastic_sampler.h"
#include "cohort/torch/sharded_parameters.h"

namespace cohort::detail {

// Collective over view.group.
void save_elastic_checkpoint(const std::string& directory, const ShardedParameters& view,
                             torch::optim::Optimizer& optimizer, int64_t committed,
                             const ElasticSampler& sampler);

// The committed steps of the checkpoint loaded (model, optimizer, sampler), or nullopt when
// `directory` holds none. Collective over view.group; throws ElasticError when the sampler's
// file of the checkpoint's step is missing.
std::optional<int64_t> load_elastic_checkpoint(const std::string& directory,
                                               const ShardedParameters& view,
                                               torch::optim::Optimizer& optimizer,
                                               ElasticSampler& sampler);

}  // namespace cohort::detail
