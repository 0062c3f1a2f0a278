// PlanInput's file (include/cohort/torch/plan/planner.h): the model's parameters and units, the
// optimizer's state per element and the measured compute, as JSON:
//   {"version": 1, "optimizer_state_per_element": 8, "units": ["", "blocks.0", ...],
//    "zero_grad_keeps_gradients": true,                        (optional: this build's libtorch)
//    "master_weights": "bfloat16",                         (optional: none; or "float16")
//    "parameters": [{"name": "...", "elements": 1024, "element_bytes": 4, "unit": 1,
//                    "rows": 32}, ...],                                (rows optional: 1)
//    "min_unit_parameters": 0,                                          (optional: 0)
//    "other_unit_layouts": [{"min_unit_parameters": 500000, "units": ["", "fc1"],
//                            "unit_of": [0, 0, 1, ...]}, ...],          (optional: none)
//    "compute": {"forward_ms": 12.5, "backward_ms": 25.1, "optimizer_ms": 3.2,
//                "activation_bytes": 1048576, "gradient_ready": [0.98, ...],
//                "sharded_compute_ratio": 1.08,    (optional: 1 when absent)
//                "powersgd": [{"rank": 2, "ms": 4.1}]}}  (optional: none measured)
#include <algorithm>
#include <nlohmann/json.hpp>

#include "cohort/core/dtype.h"
#include "cohort/core/error.h"
#include "cohort/torch/plan/planner.h"
#include "cohort/torch/tensor_buffer.h"

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

// A unit index that names one of `units` (an empty list is the root unit alone).
bool names_a_unit(int64_t unit, const std::vector<std::string>& units) {
  return unit >= 0 && unit < static_cast<int64_t>(std::max<size_t>(1, units.size()));
}

UnitLayout read_layout(const json& in, size_t parameters, const std::string& origin) {
  UnitLayout layout{field<int64_t>(in, "min_unit_parameters", origin),
                    field<std::vector<std::string>>(in, "units", origin),
                    field<std::vector<int64_t>>(in, "unit_of", origin)};
  const std::string which =
      origin + ": the unit layout cut at " + std::to_string(layout.min_unit_parameters);
  if (layout.unit_of.size() != parameters) {
    throw InvalidArgument(which + " gives " + std::to_string(layout.unit_of.size()) +
                          " parameters' units for " + std::to_string(parameters) + " parameters");
  }
  for (int64_t unit : layout.unit_of) {
    if (!names_a_unit(unit, layout.units))
      throw InvalidArgument(which + " has a unit out of range");
  }
  return layout;
}

// "master_weights": the 16-bit dtype by the name dtype_name gives it.
torch::Dtype sixteen_bit_dtype(const std::string& name, const std::string& origin) {
  if (name == dtype_name(DType::kBFloat16)) return torch::kBFloat16;
  if (name == dtype_name(DType::kFloat16)) return torch::kFloat16;
  throw InvalidArgument(origin + ": 'master_weights' must be \"bfloat16\" or \"float16\", got \"" +
                        name + "\"");
}

}  // namespace

std::string PlanInput::to_json() const {
  json parameters = json::array();
  for (const auto& p : model.parameters) {
    parameters.push_back({{"name", p.name},
                          {"elements", p.elements},
                          {"element_bytes", p.element_bytes},
                          {"unit", p.unit},
                          {"rows", p.rows}});
  }
  json out = {{"version", kVersion},
              {"optimizer_state_per_element", model.optimizer_state_per_element},
              {"zero_grad_keeps_gradients", model.zero_grad_keeps_gradients},
              {"units", model.units},
              {"parameters", parameters},
              {"min_unit_parameters", model.min_unit_parameters},
              {"compute",
               {{"forward_ms", compute.forward_s * 1e3},
                {"backward_ms", compute.backward_s * 1e3},
                {"optimizer_ms", compute.optimizer_s * 1e3},
                {"activation_bytes", compute.activation_bytes},
                {"gradient_ready", compute.gradient_ready},
                {"sharded_compute_ratio", compute.sharded_compute_ratio}}}};
  json powersgd = json::array();
  for (const auto& cost : compute.powersgd) {
    powersgd.push_back({{"rank", cost.rank}, {"ms", cost.seconds * 1e3}});
  }
  out["compute"]["powersgd"] = powersgd;
  if (model.master_weights) out["master_weights"] = dtype_name(to_dtype(*model.master_weights));
  json layouts = json::array();
  for (const auto& l : model.other_unit_layouts) {
    layouts.push_back({{"min_unit_parameters", l.min_unit_parameters},
                       {"units", l.units},
                       {"unit_of", l.unit_of}});
  }
  out["other_unit_layouts"] = layouts;
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
  if (in.contains("master_weights")) {
    model.master_weights =
        sixteen_bit_dtype(field<std::string>(in, "master_weights", origin), origin);
  }
  if (in.contains("zero_grad_keeps_gradients")) {
    model.zero_grad_keeps_gradients = field<bool>(in, "zero_grad_keeps_gradients", origin);
  }
  for (const auto& p : field<json>(in, "parameters", origin)) {
    model.parameters.push_back(
        {field<std::string>(p, "name", origin), field<int64_t>(p, "elements", origin),
         field<int64_t>(p, "element_bytes", origin), field<int64_t>(p, "unit", origin)});
    ParameterSpec& added = model.parameters.back();
    if (p.contains("rows")) added.rows = field<int64_t>(p, "rows", origin);
    if (added.elements < 0 || added.element_bytes <= 0 || !names_a_unit(added.unit, model.units) ||
        added.rows < 1) {
      throw InvalidArgument(origin + ": parameter '" + added.name +
                            "' has a negative size, no bytes per element, a unit out of range "
                            "or fewer than 1 row");
    }
  }
  if (model.parameters.empty())
    throw InvalidArgument(origin + ": the plan input has no parameters");
  if (in.contains("min_unit_parameters")) {
    model.min_unit_parameters = field<int64_t>(in, "min_unit_parameters", origin);
  }
  if (in.contains("other_unit_layouts")) {
    for (const auto& layout : field<json>(in, "other_unit_layouts", origin)) {
      model.other_unit_layouts.push_back(read_layout(layout, model.parameters.size(), origin));
    }
  }
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
  if (compute.contains("powersgd")) {
    for (const auto& cost : field<json>(compute, "powersgd", origin)) {
      c.powersgd.push_back(
          {field<int>(cost, "rank", origin), field<double>(cost, "ms", origin) * 1e-3});
      if (c.powersgd.back().rank < 1 || !(c.powersgd.back().seconds >= 0)) {
        throw InvalidArgument(origin + ": a powersgd cost needs a rank >= 1 and ms >= 0");
      }
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
