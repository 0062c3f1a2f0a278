// Which parameters form each FSDP unit (Note [FSDP units]).
//
// Note [FSDP units]
// A unit is a submodule, named by the user (FsdpOptions::units) or chosen by the auto-wrap
// policy, and owns every parameter under it that no deeper unit owns. The parameters outside
// every unit form the root unit (name ""). A parameter registered under two names (weights
// shared by two layers) belongs to the unit of its first name. Units are listed in the order
// of their first parameter in module->parameters(); a unit without parameters is dropped.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/torch/shard/fsdp.h"

namespace cohort {

struct UnitParameter {
  std::string name;      // as module->named_parameters() names it
  torch::Tensor tensor;  // the module's own parameter
};

struct UnitPlan {
  std::string name;  // submodule path; "" for the root unit
  std::vector<UnitParameter> parameters;
};

// Throws InvalidArgument for a unit path that names no submodule, a path named twice, or one
// module named under two paths.
std::vector<UnitPlan> plan_units(torch::nn::Module& model, const FsdpOptions& options);

}  // namespace cohort
