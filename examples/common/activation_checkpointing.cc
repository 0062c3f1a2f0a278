#include "activation_checkpointing.h"

#include <cstdio>
#include <string>

namespace cohort_examples {

void checkpoint_activations(torch::nn::Module& model, const cohort::CheckpointPolicy& policy,
                            bool say) {
  const std::vector<std::string> regions = cohort::checkpoint_modules(model, policy);
  if (!say) return;
  std::string names;
  for (const auto& region : regions) names += (names.empty() ? "" : ", ") + region;
  std::printf("activation checkpointing: %zu region(s) recomputed in backward: %s\n",
              regions.size(), names.c_str());
}

}  // namespace cohort_examples
