// ModelSpec, MachineSpec and the names of the planner's configurations
// (include/cohort/torch/plan/planner.h).
#include <map>
#include <sstream>

#include "cohort/core/check.h"
#include "cohort/torch/plan/planner.h"
#include "cohort/torch/shard/fsdp.h"
#include "cohort/torch/tensor_buffer.h"
#include "plan/step_model.h"
#include "shard/unit_plan.h"

namespace cohort {

ModelSpec ModelSpec::of(torch::nn::Module& module, int64_t optimizer_state_per_element,
                        int64_t min_unit_parameters) {
  FsdpOptions fsdp;
  fsdp.auto_wrap.min_parameters = min_unit_parameters;
  const std::vector<UnitPlan> units = plan_units(module, fsdp);
  ModelSpec spec;
  spec.optimizer_state_per_element = optimizer_state_per_element;
  std::map<const void*, int64_t> unit_of;  // a parameter's storage -> its unit
  for (size_t u = 0; u < units.size(); ++u) {
    spec.units.push_back(units[u].name);
    for (const auto& p : units[u].parameters) {
      unit_of[p.tensor.unsafeGetTensorImpl()] = static_cast<int64_t>(u);
    }
  }
  for (const auto& item : module.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    const auto unit = unit_of.find(p.unsafeGetTensorImpl());
    spec.parameters.push_back({item.key(), p.numel(), static_cast<int64_t>(p.element_size()),
                               unit == unit_of.end() ? 0 : unit->second});
  }
  return spec;
}

int64_t ModelSpec::parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : parameters) bytes += p.bytes();
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

const char* plan_strategy_name(PlanStrategy strategy) {
  switch (strategy) {
    case PlanStrategy::kDdp: return "ddp";
    case PlanStrategy::kZero1: return "zero1";
    case PlanStrategy::kZero2: return "zero2";
    case PlanStrategy::kFullShard: return "full_shard";
    case PlanStrategy::kShardGradOp: return "shard_grad_op";
    case PlanStrategy::kHybridShard: return "hybrid_shard";
  }
  return "?";
}

std::optional<PlanStrategy> plan_strategy_named(const std::string& name) {
  for (auto strategy :
       {PlanStrategy::kDdp, PlanStrategy::kZero1, PlanStrategy::kZero2, PlanStrategy::kFullShard,
        PlanStrategy::kShardGradOp, PlanStrategy::kHybridShard}) {
    if (name == plan_strategy_name(strategy)) return strategy;
  }
  return std::nullopt;
}

bool detail::uses_buckets(PlanStrategy strategy) {
  return strategy == PlanStrategy::kDdp || strategy == PlanStrategy::kZero1 ||
         strategy == PlanStrategy::kZero2;
}

std::string PlanConfig::describe() const {
  std::ostringstream out;
  out << plan_strategy_name(strategy);
  if (local_sgd_period > 0) {
    out << ", local SGD every " << local_sgd_period << " steps";
  } else if (detail::uses_buckets(strategy)) {
    out << ", " << bucket_cap_mb << " MiB buckets (first " << first_bucket_cap_mb << ")";
  }
  out << ", " << (reduce_dtype == torch::kBFloat16 ? "bfloat16" : "float32");
  return out.str();
}

}  // namespace cohort
