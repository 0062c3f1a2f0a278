// ModelSpec, MachineSpec and the names of the planner's configurations
// (include/cohort/torch/plan/planner.h).
#include <algorithm>
#include <map>
#include <sstream>

#include "cohort/core/check.h"
#include "cohort/torch/plan/planner.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/tensor_buffer.h"
#include "plan/step_model.h"
#include "shard/unit_plan.h"

namespace cohort {

namespace {

// The units FsdpOptions with auto_wrap.min_parameters = `min_unit_parameters` cuts, and each
// trainable parameter's (named_parameters order).
UnitLayout cut_units(torch::nn::Module& module, int64_t min_unit_parameters) {
  FsdpOptions fsdp;
  fsdp.auto_wrap.min_parameters = min_unit_parameters;
  const std::vector<UnitPlan> units = plan_units(module, fsdp);
  UnitLayout layout;
  layout.min_unit_parameters = min_unit_parameters;
  std::map<const void*, int64_t> unit_of;  // a parameter's storage -> its unit
  for (size_t u = 0; u < units.size(); ++u) {
    layout.units.push_back(units[u].name);
    for (const auto& p : units[u].parameters) {
      unit_of[p.tensor.unsafeGetTensorImpl()] = static_cast<int64_t>(u);
    }
  }
  for (const auto& p : module.parameters()) {
    if (!p.requires_grad()) continue;
    const auto unit = unit_of.find(p.unsafeGetTensorImpl());
    layout.unit_of.push_back(unit == unit_of.end() ? 0 : unit->second);
  }
  return layout;
}

bool same_cut(const UnitLayout& a, const UnitLayout& b) {
  return a.units == b.units && a.unit_of == b.unit_of;
}

// The spec's own units as a layout.
UnitLayout own_layout(const ModelSpec& spec) {
  UnitLayout layout{spec.min_unit_parameters, spec.units, {}};
  for (const auto& p : spec.parameters) layout.unit_of.push_back(p.unit);
  return layout;
}

}  // namespace

ModelSpec ModelSpec::of(torch::nn::Module& module, int64_t optimizer_state_per_element,
                        int64_t min_unit_parameters,
                        const std::vector<int64_t>& other_min_unit_parameters) {
  const UnitLayout own = cut_units(module, min_unit_parameters);
  ModelSpec spec;
  spec.optimizer_state_per_element = optimizer_state_per_element;
  spec.units = own.units;
  spec.min_unit_parameters = min_unit_parameters;
  size_t index = 0;
  for (const auto& item : module.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    spec.parameters.push_back({item.key(), p.numel(), static_cast<int64_t>(p.element_size()),
                               own.unit_of[index++], p.dim() >= 2 ? p.size(0) : 1});
  }
  for (int64_t threshold : other_min_unit_parameters) {
    UnitLayout layout = cut_units(module, threshold);
    const auto seen = [&](const UnitLayout& other) { return same_cut(layout, other); };
    if (same_cut(layout, own) ||
        std::any_of(spec.other_unit_layouts.begin(), spec.other_unit_layouts.end(), seen)) {
      continue;
    }
    spec.other_unit_layouts.push_back(std::move(layout));
  }
  return spec;
}

std::vector<int64_t> ModelSpec::unit_thresholds(torch::nn::Module& module) {
  int64_t elements = 0;
  for (const auto& p : module.parameters()) {
    if (p.requires_grad()) elements += p.numel();
  }
  std::vector<int64_t> thresholds = {0};
  for (int64_t divisor = 2; divisor <= 32 && elements / divisor > 0; divisor *= 2) {
    thresholds.push_back(elements / divisor);
  }
  return thresholds;
}

ModelSpec ModelSpec::with_units(int64_t threshold) const {
  if (threshold == min_unit_parameters) return *this;
  const auto layout =
      std::find_if(other_unit_layouts.begin(), other_unit_layouts.end(),
                   [&](const UnitLayout& l) { return l.min_unit_parameters == threshold; });
  COHORT_CHECK(layout != other_unit_layouts.end(),
               "planner: the model holds no unit layout cut at ", threshold,
               " parameters (it holds ", unit_layout_thresholds().size(),
               " layouts; ModelSpec::of's other_min_unit_parameters adds them)");
  COHORT_CHECK(layout->unit_of.size() == parameters.size(), "planner: the unit layout cut at ",
               threshold, " names ", layout->unit_of.size(), " parameters' units; the model has ",
               parameters.size());
  ModelSpec spec = *this;
  // The chosen layout becomes the spec's own, and its own one of the others.
  spec.other_unit_layouts[layout - other_unit_layouts.begin()] = own_layout(*this);
  spec.units = layout->units;
  spec.min_unit_parameters = threshold;
  for (size_t i = 0; i < parameters.size(); ++i) spec.parameters[i].unit = layout->unit_of[i];
  return spec;
}

std::vector<int64_t> ModelSpec::unit_layout_thresholds() const {
  std::vector<int64_t> thresholds = {min_unit_parameters};
  for (const auto& layout : other_unit_layouts) thresholds.push_back(layout.min_unit_parameters);
  return thresholds;
}

int64_t ModelSpec::parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : parameters) bytes += p.bytes();
  return bytes;
}

int64_t ModelSpec::model_bytes(const ParameterSpec& parameter) const {
  if (!master_weights) return parameter.bytes();
  return parameter.elements * static_cast<int64_t>(c10::elementSize(*master_weights));
}

int64_t ModelSpec::model_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : parameters) bytes += model_bytes(p);
  return bytes;
}

int64_t ModelSpec::elements() const {
  int64_t elements = 0;
  for (const auto& p : parameters) elements += p.elements;
  return elements;
}

MachineSpec MachineSpec::of(Group& group) {
  MachineSpec machine;
  GroupShape& shape = machine.shape;
  shape.world = group.size();
  shape.nodes = group.num_nodes();
  shape.local_size = shape.nodes * group.local_size() == shape.world ? group.local_size() : 0;
  // What the group runs a large allreduce with says whether its nodes share memory windows.
  const Algorithm large = group.algorithm_for(CollectiveKind::kAllreduce, size_t{64} << 20);
  shape.shared_memory = large == Algorithm::kShm || large == Algorithm::kHierarchical ||
                        (shape.nodes > 1 && group.options().shared_memory);
  CostModel& links = machine.links;
  links = CostModel::load_default();
  auto figures = torch::tensor({links.tcp.alpha_s, links.tcp.beta_s_per_byte, links.shm.alpha_s,
                                links.shm.beta_s_per_byte, links.gamma_s_per_byte},
                               torch::kFloat64);
  CollectiveOptions from_rank0;
  group.broadcast(tensor_buffer(figures), from_rank0);
  const double* f = figures.data_ptr<double>();
  links.tcp = {f[0], f[1]};
  links.shm = {f[2], f[3]};
  links.gamma_s_per_byte = f[4];
  if (group.rank() != 0) links.source = "rank 0's " + links.source;
  return machine;
}

bool detail::uses_buckets(StrategyKind strategy) {
  return strategy == StrategyKind::kDdp || strategy == StrategyKind::kZero1 ||
         strategy == StrategyKind::kZero2;
}

std::string PlanConfig::describe() const {
  std::ostringstream out;
  out << strategy_name(strategy);
  if (local_sgd_period > 0) {
    out << ", local SGD every " << local_sgd_period << " steps";
  } else if (detail::uses_buckets(strategy)) {
    out << ", " << bucket_cap_mb << " MiB buckets (first " << first_bucket_cap_mb << ")";
  } else {  // FSDP
    if (min_unit_parameters.value_or(0) > 0) {
      out << ", units of " << *min_unit_parameters << "+ parameters";
    }
    if (!fsdp_prefetch) out << ", no prefetch";
  }
  if (powersgd_rank > 0) {
    out << ", powersgd rank " << powersgd_rank;
  } else {
    out << ", " << (reduce_dtype == torch::kBFloat16 ? "bfloat16" : "float32");
  }
  return out.str();
}

}  // namespace cohort
