// checkpoint_modules (include/cohort/torch/activation_checkpoint/checkpoint_modules.h): chooses
// the regions a policy names, checks all of them, then puts checkpoint handles into their
// Sequentials (Note [Checkpoint handles] in sequential_handles.cc).

#include "cohort/torch/activation_checkpoint/checkpoint_modules.h"

#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "activation_checkpoint/sequential_handles.h"
#include "cohort/core/check.h"

namespace cohort {

namespace {

using activation_checkpoint::CheckpointedSpanImpl;
using activation_checkpoint::SpanContinuationImpl;
using torch::nn::Module;

std::string join(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : parent + "." + child;
}

// Where a submodule sits: its parent and its position among the parent's children.
struct Place {
  std::string path;
  std::shared_ptr<Module> module;
  Module* parent = nullptr;
  std::string parent_path;
  size_t index = 0;  // among the parent's children
  size_t order = 0;  // in the model's named_modules()
};

torch::nn::SequentialImpl* as_sequential(Module* module) {
  return dynamic_cast<torch::nn::SequentialImpl*>(module);
}

// The model and its submodules with their paths, in named_modules() order (the model itself
// need not be held by a shared_ptr).
std::vector<std::pair<std::string, Module*>> modules_of(Module& model) {
  std::vector<std::pair<std::string, Module*>> modules{{"", &model}};
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    modules.emplace_back(item.key(), item.value().get());
  return modules;
}

std::map<std::string, Place> places_of(Module& model) {
  std::map<std::string, Place> places;
  size_t order = 0;
  for (const auto& [path, module] : modules_of(model)) {
    size_t index = 0;
    for (const auto& child : module->named_children()) {
      const std::string child_path = join(path, child.key());
      if (places.count(child_path) == 0)
        places[child_path] = {child_path, child.value(), module, path, index, 0};
      ++index;
    }
  }
  for (const auto& [path, module] : modules_of(model)) {
    auto it = places.find(path);
    if (it != places.end()) it->second.order = order++;
  }
  return places;
}

// Why `place`'s module cannot be checkpointed from outside, and what to do instead.
std::string holder_problem(const Place& place) {
  const std::string what = "checkpoint_modules: '" + place.path + "' ";
  const std::string instead =
      ". Hold it in a torch::nn::Sequential (whose forward() calls its children through "
      "handles cohort can replace), or call cohort::checkpoint(module, x) in forward()";
  if (dynamic_cast<torch::nn::ModuleListImpl*>(place.parent) != nullptr) {
    return what + "is held by a torch::nn::ModuleList, whose parent's forward() calls it by its "
                  "own type (list[i]->as<T>()->forward(x)): libtorch has no hook there" +
           instead;
  }
  if (dynamic_cast<torch::nn::ModuleDictImpl*>(place.parent) != nullptr) {
    return what + "is held by a torch::nn::ModuleDict, whose parent's forward() calls it by its "
                  "own type: libtorch has no hook there" +
           instead;
  }
  return what + "is a member of " + place.parent->name() +
         ", whose forward() calls it directly: libtorch has no hook there" + instead;
}

// The handle through which `place`'s Sequential calls it.
torch::nn::AnyModule& handle_of(const Place& place) {
  auto* sequential = as_sequential(place.parent);
  COHORT_INTERNAL_ASSERT(sequential != nullptr && place.index < sequential->size(),
                         "checkpoint_modules: no handle for ", place.path);
  return *(sequential->begin() + static_cast<std::ptrdiff_t>(place.index));
}

void check_not_checkpointed(const Place& place) {
  COHORT_CHECK(!activation_checkpoint::is_checkpoint_handle(*handle_of(place).ptr()),
               "checkpoint_modules: '", place.path,
               "' is checkpointed already (by an earlier call or another rule of this policy); "
               "a module is checkpointed once. Nest regions with cohort::checkpoint instead");
}

struct Region {
  std::string name;
  std::vector<Place> children;  // consecutive children of one Sequential
};

std::vector<Place> chosen_children(const std::map<std::string, Place>& places,
                                   const CheckpointPolicy& policy) {
  std::set<std::string> chosen;
  for (const auto& path : policy.paths) {
    auto it = places.find(path);
    COHORT_CHECK(it != places.end(), "checkpoint_modules: no submodule is named '", path,
                 "' (paths are as named_modules() names them, e.g. \"blocks.3\")");
    COHORT_CHECK(as_sequential(it->second.parent) != nullptr, holder_problem(it->second));
    chosen.insert(path);
  }
  for (const auto& [path, place] : places) {
    const bool in_sequential = as_sequential(place.parent) != nullptr;
    if (policy.sequential_children && in_sequential) chosen.insert(path);
    if (policy.predicate && policy.predicate(path, *place.module)) {
      COHORT_CHECK(in_sequential, holder_problem(place), " (chosen by the policy's predicate)");
      chosen.insert(path);
    }
  }
  std::vector<Place> ordered;
  for (const auto& path : chosen) ordered.push_back(places.at(path));
  std::sort(ordered.begin(), ordered.end(),
            [](const Place& a, const Place& b) { return a.order < b.order; });
  std::vector<Place> every;
  for (size_t i = 0; i < ordered.size(); i += policy.every) every.push_back(ordered[i]);
  return every;
}

std::vector<Region> span_regions(Module& model, const std::map<std::string, Place>& places,
                                 const CheckpointPolicy& policy) {
  std::vector<Region> regions;
  for (const auto& span : policy.spans) {
    Module* holder = nullptr;
    for (const auto& [path, module] : modules_of(model))
      if (path == span.sequential) holder = module;
    COHORT_CHECK(holder != nullptr && as_sequential(holder) != nullptr,
                 "checkpoint_modules: the span's sequential '", span.sequential,
                 "' is not a torch::nn::Sequential of the model");
    const size_t size = as_sequential(holder)->size();
    COHORT_CHECK(span.begin < span.end && span.end <= size, "checkpoint_modules: the span [",
                 span.begin, ", ", span.end, ") of '", span.sequential,
                 "' is empty or beyond its ", size, " children");
    Region region{span.sequential + "[" + std::to_string(span.begin) + ":" +
                      std::to_string(span.end) + "]",
                  {}};
    size_t index = 0;
    for (const auto& child : holder->named_children()) {
      if (index >= span.begin && index < span.end)
        region.children.push_back(places.at(join(span.sequential, child.key())));
      ++index;
    }
    regions.push_back(std::move(region));
  }
  return regions;
}

// Every child once, none checkpointed already.
void check_regions(const std::vector<Region>& regions) {
  std::set<const Module*> seen;
  for (const auto& region : regions) {
    for (const auto& child : region.children) {
      check_not_checkpointed(child);
      COHORT_CHECK(seen.insert(child.module.get()).second, "checkpoint_modules: '", child.path,
                   "' is chosen twice (by two spans, or by a span and a path or rule); a module "
                   "is checkpointed once");
    }
  }
}

void install(const Region& region, const CheckpointOptions& options) {
  std::vector<torch::nn::AnyModule> handles;
  for (const auto& child : region.children) handles.push_back(handle_of(child));
  CheckpointOptions named = options;
  named.name = region.name;
  handle_of(region.children.front()) =
      torch::nn::AnyModule(std::make_shared<CheckpointedSpanImpl>(std::move(handles), named));
  for (size_t i = 1; i < region.children.size(); ++i) {
    handle_of(region.children[i]) = torch::nn::AnyModule(std::make_shared<SpanContinuationImpl>());
  }
}

}  // namespace

std::vector<std::string> checkpoint_modules(Module& model, const CheckpointPolicy& policy) {
  COHORT_CHECK(policy.every >= 1, "checkpoint_modules: every must be at least 1 (1: every "
                                  "chosen module; 2: every other one)");
  const std::map<std::string, Place> places = places_of(model);
  std::vector<Region> regions;
  for (const Place& place : chosen_children(places, policy)) regions.push_back({place.path, {place}});
  for (Region& span : span_regions(model, places, policy)) regions.push_back(std::move(span));
  std::stable_sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) {
    return a.children.front().order < b.children.front().order;
  });
  COHORT_CHECK(!regions.empty(), "checkpoint_modules: the policy chose nothing to checkpoint "
                                 "(no paths, spans, sequential_children or predicate matched)");
  check_regions(regions);
  std::vector<std::string> names;
  for (const Region& region : regions) {
    install(region, policy.options);
    names.push_back(region.name);
  }
  return names;
}

}  // namespace cohort
