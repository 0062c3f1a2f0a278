// --activation-checkpointing of both examples (docs/activation_checkpointing.md): which regions
// of the model are recomputed in backward instead of kept.
#pragma once

#include <torch/torch.h>

#include "cohort/torch/activation_checkpoint/checkpoint_modules.h"

namespace cohort_examples {

// Checkpoints what `policy` chooses in `model` (before the strategy wraps it, after
// --sync-bn's conversion); `say`: print the regions.
void checkpoint_activations(torch::nn::Module& model, const cohort::CheckpointPolicy& policy,
                            bool say);

}  // namespace cohort_examples
