#include "elastic/optimizer_broadcast.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "call_sites.h"
#include "checkpoint/checkpoint_collectives.h"
#include "checkpoint/optimizer_codec.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"

namespace cohort::detail {
namespace {

using nlohmann::json;

// Rank 0's `text` on every member (checkpoint_collectives.h's status-and-bytes broadcast).
std::string broadcast_text(Group& group, std::string text) {
  int64_t status = kStatusOk;
  broadcast_outcome(group, status, text, 0, call_sites::kElasticHeal);
  return text;
}

std::vector<torch::Tensor> all_parameters(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& tensor : group.params()) out.push_back(tensor);
  }
  return out;
}

// Each param group's options.
json describe_options(const torch::optim::Optimizer& optimizer, const OptimizerCodec& codec) {
  json groups = json::array();
  for (const auto& group : optimizer.param_groups()) {
    groups.push_back(codec.options_json(group.options()));
  }
  return groups;
}

// Sets each param group's options to `described` (describe_options of rank 0's).
void apply_options(torch::optim::Optimizer& optimizer, const OptimizerCodec& codec,
                   const json& described) {
  auto& groups = optimizer.param_groups();
  COHORT_CHECK(described.size() == groups.size(), "ElasticTrainer: this member's optimizer has ",
               groups.size(), " param groups but rank 0's has ", described.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_options(codec.options_from_json(described.at(g), groups[g].options()));
  }
}

// What rank 0 holds, without the tensors: the codec's kind, each group's options, and for each
// parameter whether it has state, its step and the names of its state tensors.
json describe_state(const torch::optim::Optimizer& optimizer, const OptimizerCodec& codec) {
  json parameters = json::array();
  for (const auto& tensor : all_parameters(optimizer)) {
    const auto* state = state_of(optimizer, tensor);
    if (state == nullptr) {
      parameters.push_back(nullptr);
      continue;
    }
    const FlatState flat = codec.read_state(*state);
    json fields = json::array();
    for (const auto& field : flat.fields) fields.push_back(field.first);
    parameters.push_back({{"has_step", flat.has_step}, {"step", flat.step}, {"fields", fields}});
  }
  return {{"kind", codec.kind()},
          {"groups", describe_options(optimizer, codec)},
          {"parameters", parameters}};
}

// The state tensors in broadcast order: rank 0's own, fresh ones elsewhere.
std::vector<torch::Tensor> state_tensors(const torch::optim::Optimizer& optimizer,
                                         const OptimizerCodec& codec, const json& described,
                                         bool root) {
  std::vector<torch::Tensor> out;
  const auto parameters = all_parameters(optimizer);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const json& entry = described.at("parameters").at(i);
    if (entry.is_null()) continue;
    if (root) {
      for (auto& field : codec.read_state(*state_of(optimizer, parameters[i])).fields) {
        out.push_back(field.second.contiguous());
      }
    } else {
      for (size_t f = 0; f < entry.at("fields").size(); ++f) {
        out.push_back(torch::empty_like(parameters[i], torch::MemoryFormat::Contiguous));
      }
    }
  }
  return out;
}

void install_state(torch::optim::Optimizer& optimizer, const OptimizerCodec& codec,
                   const json& described, const std::vector<torch::Tensor>& tensors) {
  apply_options(optimizer, codec, described.at("groups"));
  const auto parameters = all_parameters(optimizer);
  size_t next = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const json& entry = described.at("parameters").at(i);
    if (entry.is_null()) {
      set_state_of(optimizer, parameters[i], nullptr);
      continue;
    }
    FlatState flat;
    flat.has_step = entry.at("has_step").get<bool>();
    flat.step = entry.at("step").get<int64_t>();
    for (const auto& name : entry.at("fields")) {
      flat.fields.emplace_back(name.get<std::string>(), tensors.at(next++));
    }
    set_state_of(optimizer, parameters[i], codec.make_state(flat));
  }
}

void broadcast_serialized(Group& group, torch::optim::Optimizer& optimizer) {
  std::string bytes;
  if (group.rank() == 0) {
    torch::serialize::OutputArchive archive;
    optimizer.save(archive);
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  bytes = broadcast_text(group, std::move(bytes));
  if (group.rank() == 0) return;
  torch::serialize::InputArchive archive;
  std::istringstream in(bytes);
  archive.load_from(in);
  optimizer.load(archive);
}

}  // namespace

void broadcast_optimizer_state(Group& group, torch::optim::Optimizer& optimizer) {
  const OptimizerCodec* codec = codec_of(optimizer);
  const std::string mine = codec ? codec->kind() : "serialized";
  const json described = json::parse(broadcast_text(
      group, group.rank() == 0
                 ? (codec ? describe_state(optimizer, *codec).dump() : json{{"kind", mine}}.dump())
                 : std::string()));
  const std::string kind = described.at("kind").get<std::string>();
  COHORT_CHECK(kind == mine, "ElasticTrainer: this member's optimizer is ", mine,
               " but rank 0's is ", kind, "; give every member the same optimizer");
  if (!codec) return broadcast_serialized(group, optimizer);
  COHORT_CHECK(described.at("parameters").size() == all_parameters(optimizer).size(),
               "ElasticTrainer: this member's optimizer steps ", all_parameters(optimizer).size(),
               " tensors but rank 0's steps ", described.at("parameters").size());
  const auto tensors = state_tensors(optimizer, *codec, described, group.rank() == 0);
  broadcast_coalesced(group, tensors, 0, call_sites::kElasticHeal);
  if (group.rank() != 0) install_state(optimizer, *codec, described, tensors);
}

void broadcast_optimizer_options(Group& group, torch::optim::Optimizer& optimizer) {
  const OptimizerCodec* codec = codec_of(optimizer);
  COHORT_INTERNAL_ASSERT(codec != nullptr, "options of an optimizer no codec knows");
  const json rank0 = json::parse(broadcast_text(
      group, group.rank() == 0 ? describe_options(optimizer, *codec).dump() : std::string()));
  if (group.rank() != 0) apply_options(optimizer, *codec, rank0);
}

}  // namespace cohort::detail
