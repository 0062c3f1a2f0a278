// --strategy of both examples: the library's strategies (cohort/torch/strategy/strategy.h,
// which wraps the model) by name, and "auto", the planner's choice (auto_plan.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/strategy/strategy.h"

namespace cohort_examples {

// Every cohort::strategy_name; what --strategy takes (those and "auto").
std::vector<std::string> known_strategy_names();
std::vector<std::string> strategy_choices();

// The --strategy help text: the names and what each is.
std::string strategy_help();

// The strategy of that name (not "auto"); throws cohort::InvalidArgument naming the others.
cohort::StrategyKind strategy_kind(const std::string& name);

// One line per rank, printed by rank 0: each rank's model state (strategy.model_state_bytes),
// the most CPU tensor memory its training steps held at once above what training started with
// (step_memory_peak_bytes(), memory.h: activations, gradients, temporaries) and peak RSS.
// Collective over `group`.
void print_memory_of_ranks(const cohort::Strategy& strategy,
                           const torch::optim::Optimizer& optimizer, cohort::Group& group);

}  // namespace cohort_examples
