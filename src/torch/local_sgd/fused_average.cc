// One allreduce per dtype for a whole model: a model is many small tensors, and each allreduce
// costs at least a round trip per algorithm step, so averaging them one by one would cost the
// latency of a collective per tensor instead of once.
#include <sstream>
#include <unordered_set>

#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "local_sgd/averaging.h"
#include "model_check.h"

namespace cohort::local_sgd {

void average_fused(Group& group, const std::vector<torch::Tensor>& tensors,
                   const std::string& who) {
  if (group.size() == 1) return;  // the average over one rank is the tensor
  // Kinds in order of first appearance, so that every rank issues the allreduces in one order.
  std::vector<std::pair<torch::ScalarType, torch::Device>> kinds;
  std::vector<std::vector<torch::Tensor>> members;
  for (const auto& tensor : tensors) {
    COHORT_CHECK(tensor.defined(), who, ": got an undefined tensor to average");
    COHORT_CHECK(tensor.is_floating_point(), who, ": can only average floating-point tensors, got ",
                 c10::toString(tensor.scalar_type()), " ", tensor.sizes());
    const std::pair<torch::ScalarType, torch::Device> kind{tensor.scalar_type(), tensor.device()};
    size_t k = 0;
    while (k < kinds.size() && kinds[k] != kind) ++k;
    if (k == kinds.size()) {
      kinds.push_back(kind);
      members.emplace_back();
    }
    members[k].push_back(tensor);
  }
  torch::NoGradGuard no_grad;
  for (auto& same_kind : members) {
    std::vector<torch::Tensor> flat;
    for (const auto& t : same_kind) flat.push_back(t.detach().reshape({-1}));
    auto buffer = torch::cat(flat);
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.stream = current_stream(buffer);
    group.allreduce(tensor_buffer(buffer), options);
    int64_t offset = 0;
    for (auto& t : same_kind) {
      t.detach().copy_(buffer.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

void check_same_parameters(Group& group, const std::vector<torch::Tensor>& parameters,
                           const std::string& who) {
  std::vector<std::string> entries;
  for (const auto& p : parameters) {
    std::ostringstream entry;
    entry << c10::toString(p.scalar_type()) << " " << p.sizes();
    entries.push_back(entry.str());
  }
  check_same_on_all_ranks(group, entries, "parameter", CallSite::kUser, who);
}

void check_call(Group& group, const std::vector<torch::Tensor>& parameters,
                const torch::optim::Optimizer* optimizer, bool average_state, bool& checked,
                const std::string& who) {
  COHORT_CHECK(!average_state || optimizer != nullptr, who,
               ": average_optimizer_state is on but no optimizer was passed to average(); pass "
               "the optimizer whose state to average");
  if (checked) return;
  check_same_parameters(group, parameters, who);
  checked = true;
}

void average_round(Group& group, const std::vector<torch::Tensor>& parameters,
                   torch::optim::Optimizer* optimizer, bool average_state,
                   std::vector<std::string>& unaveraged_state, const std::string& who) {
  average_fused(group, parameters, who);
  if (average_state && optimizer != nullptr) {
    unaveraged_state = average_optimizer_state(group, *optimizer, who);
  }
}

std::vector<torch::Tensor> trainable_parameters(torch::nn::Module& module) {
  std::vector<torch::Tensor> parameters;
  std::unordered_set<const void*> seen;  // a parameter shared by two layers is listed twice
  for (const auto& p : module.parameters(/*recurse=*/true)) {
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    parameters.push_back(p);
  }
  return parameters;
}

}  // namespace cohort::local_sgd
