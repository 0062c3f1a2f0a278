// PlanInput's file (include/cohort/torch/plan/planner.h): the model's parameters and units, the
// optimizer's state per element and the measured compute, as JSON:
//   {"version": 1, "optimizer_state_per_element": 8, "units": ["", "blocks.0", ...],
//    "parameters": [{"name": "...", "elements": 1024, "element_bytes": 4, "unit": 1}, ...],
//    "compute": {"forward_ms": 12.5, "backward_ms": 25.1, "optimizer_ms": 3.2,
//                "activation_bytes": 1048576, "gradient_ready": [0.98, ...],
//                "sharded_compute_ratio": 1.08}}   (optional: 1 when absent)
#include <nlohmann/json.hpp>

#include "cohort/core/error.h"
#include "cohort/torch/plan/planner.h"

namespace cohort {
namespace {

using nlohmann::json;
constexpr int kVersion = 1;

template <typename T>
T field(const json& object, const char* name, const std::string& origin) {
  if (!object.is_object() || !object.contains(name)) {
    throw InvalidArgument(origin + ": the plan input has no '" + name + "'");
  }
  try {
    return object.at(name).get<T>();
  } catch (const json::exception&) {
    throw InvalidArgument(origin + ": the plan input's '" + name + "' has the wrong type");
  }
}

}  // namespace

std::string PlanInput::to_json() const {
  json parameters = json::array();
  for (const auto& p : model.parameters) {
    parameters.push_back({{"name", p.name},
                          {"elements", p.elements},
                          {"element_bytes", p.element_bytes},
                          {"unit", p.unit}});
  }
  json out = {{"version", kVersion},
              {"optimizer_state_per_element", model.optimizer_state_per_element},
              {"units", model.units},
              {"parameters", parameters},
              {"compute",
               {{"forward_ms", compute.forward_s * 1e3},
                {"backward_ms", compute.backward_s * 1e3},
                {"optimizer_ms", compute.optimizer_s * 1e3},
                {"activation_bytes", compute.activation_bytes},
                {"gradient_ready", compute.gradient_ready},
                {"sharded_compute_ratio", compute.sharded_compute_ratio}}}};
  return out.dump(1) + "\n";
}

PlanInput PlanInput::from_json(const std::string& text, const std::string& origin) {
  json in;
  try {
    in = json::parse(text);
  } catch (const json::exception& e) {
    throw InvalidArgument(origin + ": not a plan input (invalid JSON: " + e.what() + ")");
  }
  if (field<int>(in, "version", origin) != kVersion) {
    throw InvalidArgument(origin + ": not a version " + std::to_string(kVersion) +
                          " plan input; write it again (--plan-out)");
  }
  PlanInput result;
  ModelSpec& model = result.model;
  model.optimizer_state_per_element = field<int64_t>(in, "optimizer_state_per_element", origin);
  model.units = field<std::vector<std::string>>(in, "units", origin);
  for (const auto& p : field<json>(in, "parameters", origin)) {
    model.parameters.push_back(
        {field<std::string>(p, "name", origin), field<int64_t>(p, "elements", origin),
         field<int64_t>(p, "element_bytes", origin), field<int64_t>(p, "unit", origin)});
    const ParameterSpec& added = model.parameters.back();
    if (added.elements < 0 || added.element_bytes <= 0 || added.unit < 0 ||
        added.unit >= static_cast<int64_t>(std::max<size_t>(1, model.units.size()))) {
      throw InvalidArgument(origin + ": parameter '" + added.name +
                            "' has a negative size, no bytes per element or a unit out of range");
    }
  }
  if (model.parameters.empty())
    throw InvalidArgument(origin + ": the plan input has no parameters");
  const json compute = field<json>(in, "compute", origin);
  ComputeProfile& c = result.compute;
  c.forward_s = field<double>(compute, "forward_ms", origin) * 1e-3;
  c.backward_s = field<double>(compute, "backward_ms", origin) * 1e-3;
  c.optimizer_s = field<double>(compute, "optimizer_ms", origin) * 1e-3;
  c.activation_bytes = field<int64_t>(compute, "activation_bytes", origin);
  c.gradient_ready = field<std::vector<double>>(compute, "gradient_ready", origin);
  if (compute.contains("sharded_compute_ratio")) {
    c.sharded_compute_ratio = field<double>(compute, "sharded_compute_ratio", origin);
    if (!(c.sharded_compute_ratio >= 1)) {
      throw InvalidArgument(origin + ": sharded_compute_ratio must be at least 1");
    }
  }
  if (!c.gradient_ready.empty() && c.gradient_ready.size() != model.parameters.size()) {
    throw InvalidArgument(origin + ": gradient_ready has " +
                          std::to_string(c.gradient_ready.size()) + " entries for " +
                          std::to_string(model.parameters.size()) + " parameters");
  }
  return result;
}

}  // namespace cohort
