#include "shard/unit_plan.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "cohort/core/check.h"

namespace cohort {
namespace {

bool is_container(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr;
}

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& p : module.parameters(/*recurse=*/true)) count += p.numel();
  return count;
}

std::string module_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Preorder over the children of `module`: a child the policy picks is a unit and is not
// searched further.
void auto_wrap(const torch::nn::Module& module, const std::string& path,
               const AutoWrapPolicy& policy, std::vector<std::string>& units) {
  const bool children_are_units = policy.container_children && is_container(module);
  for (const auto& child : module.named_children()) {
    const std::string name = module_path(path, child.key());
    const torch::nn::Module& m = *child.value();
    const bool pick = children_are_units ||
                      (policy.min_parameters > 0 && parameter_count(m) >= policy.min_parameters) ||
                      (policy.predicate && policy.predicate(name, m));
    if (pick) {
      units.push_back(name);
    } else {
      auto_wrap(m, name, policy, units);
    }
  }
}

void check_user_units(torch::nn::Module& model, const std::vector<std::string>& units) {
  const auto modules = model.named_modules(/*name_prefix=*/"", /*include_self=*/false);
  std::unordered_map<const torch::nn::Module*, std::string> named_as;
  std::unordered_set<std::string> seen;
  for (const std::string& unit : units) {
    COHORT_CHECK(seen.insert(unit).second, "FullyShardedDataParallel: unit '", unit,
                 "' is wrapped twice (named twice in FsdpOptions::units); name each unit once");
    const auto* found = modules.find(unit);
    COHORT_CHECK(found != nullptr, "FullyShardedDataParallel: FsdpOptions::units names '", unit,
                 "', which is not a submodule of the model (named_modules() paths look like "
                 "\"blocks.0\" or \"encoder.fc1\")");
    const auto [it, inserted] = named_as.emplace(found->get(), unit);
    COHORT_CHECK(inserted, "FullyShardedDataParallel: units '", it->second, "' and '", unit,
                 "' are the same module registered under two names; it would be wrapped twice. "
                 "Name it once");
  }
}

// The unit owning a parameter: the one with the longest path that is a prefix of its name.
std::string owner_of(const std::string& parameter, const std::vector<std::string>& units) {
  std::string best;
  bool found = false;
  for (const std::string& unit : units) {
    const bool inside = parameter.size() > unit.size() &&
                        parameter.compare(0, unit.size(), unit) == 0 &&
                        parameter[unit.size()] == '.';
    if (inside && (!found || unit.size() > best.size())) {
      best = unit;
      found = true;
    }
  }
  return best;  // "" (root) when none
}

}  // namespace

std::vector<UnitPlan> plan_units(torch::nn::Module& model, const FsdpOptions& options) {
  std::vector<std::string> units = options.units;
  if (units.empty()) {
    auto_wrap(model, "", options.auto_wrap, units);
  } else {
    check_user_units(model, units);
  }
  std::vector<UnitPlan> plans;
  std::unordered_map<std::string, size_t> index_of;
  std::unordered_set<const void*> seen;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;
    const std::string owner = owner_of(item.key(), units);
    auto [it, inserted] = index_of.emplace(owner, plans.size());
    if (inserted) plans.push_back({owner, {}});
    plans[it->second].parameters.push_back({item.key(), item.value()});
  }
  return plans;
}

}  // namespace cohort
