// The trust-ratio plumbing of cohort/torch/optim/trust_ratio.h.
//
// Note [One allreduce per step]
// A trust ratio needs the norms of whole tensors. Under ZeroDataParallel and
// FullyShardedDataParallel each rank holds a 1-D shard of every trainable parameter (the same
// list, in the same order, on every rank; a shard may be empty), so each rank computes the
// squared norms of its parts and the sum over the ranks holding one copy of the shards is the
// whole tensor's. Lars and Lamb put every squared norm of a step into one float64 vector
// (||w||^2 of each adapted tensor, then ||g||^2 or ||u||^2 of each), in param-group order, so
// the vector has the same length on every rank and one allreduce sums it. A tensor whose
// gradient is undefined on this rank (an empty shard, or an unused parameter) still takes its
// places, with zeros, for that reason.
#include "cohort/torch/optim/trust_ratio.h"

#include "call_sites.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"
#include "optim/trust_ratio.h"

namespace cohort::optim {
namespace detail {

torch::Tensor squared_norm(const torch::Tensor& t) {
  if (!t.defined()) return torch::zeros({}, torch::kFloat64);
  if (t.numel() == 0) return torch::zeros({}, t.options().dtype(torch::kFloat64));
  return t.detach().to(torch::kFloat64).square().sum();
}

void check_option(bool ok, const char* optimizer, const char* requirement, double value,
                  size_t group) {
  if (ok) return;
  throw InvalidArgument(cohort::detail::concat(optimizer, ": ", requirement, ", got ", value,
                                               " (param group ", group, ")"));
}

}  // namespace detail

namespace {

NormReduction sum_over(Group& group) {
  return [&group](torch::Tensor& squared_norms) {
    COHORT_INTERNAL_ASSERT(squared_norms.is_contiguous() && !squared_norms.is_cuda(),
                           "trust-ratio norms are reduced as a contiguous host tensor");
    CollectiveOptions options;
    options.op = ReduceOp::kSum;
    options.site = call_sites::kGradNorm;  // the norms of sharded tensors, as clip_grad_norm
    group.allreduce(tensor_buffer(squared_norms), options);
  };
}

}  // namespace

torch::Tensor TrustRatioOptimizer::evaluate(const LossClosure& closure) {
  if (closure == nullptr) return {};
  at::AutoGradMode enable_grad(true);
  return closure();
}

torch::Tensor TrustRatioOptimizer::reduce_norms(
    const std::vector<torch::Tensor>& squared_norms) const {
  // Note [One allreduce per step]
  if (squared_norms.empty()) return torch::zeros({0}, torch::kFloat64);
  // One copy to the host when the norms are on one device (one wait for a GPU, not one each).
  bool one_device = true;
  for (const auto& t : squared_norms) one_device &= t.device() == squared_norms.front().device();
  torch::Tensor all;
  if (one_device) {
    all = torch::stack(squared_norms).to(torch::kCPU);
  } else {
    std::vector<torch::Tensor> host;
    for (const auto& t : squared_norms) host.push_back(t.to(torch::kCPU));
    all = torch::stack(host);
  }
  all = all.contiguous();
  if (reduction_) reduction_(all);
  return all;
}

NormReduction shard_norm_reduction(const ShardedParameters& sharded) {
  if (sharded.norm_group == nullptr) return {};
  return sum_over(*sharded.norm_group);
}

bool exclude_one_dimensional(const std::string&, const torch::Tensor& parameter) {
  return parameter.dim() <= 1;
}

AdaptationSplit split_for_adaptation(
    const torch::OrderedDict<std::string, torch::Tensor>& parameters,
    const torch::nn::Module& module, const ExcludeRule& exclude) {
  COHORT_CHECK(static_cast<bool>(exclude), "split_for_adaptation: the exclude rule is empty");
  const auto whole = module.named_parameters();
  AdaptationSplit split;
  for (const auto& item : parameters) {
    const torch::Tensor* parameter = whole.find(item.key());
    if (parameter == nullptr) {
      throw InvalidArgument(cohort::detail::concat(
          "split_for_adaptation: '", item.key(),
          "' is not a parameter of the module given; pass the module whose named_parameters() "
          "(or whose ZeroDataParallel / FullyShardedDataParallel named_parameters()) these are"));
    }
    (exclude(item.key(), *parameter) ? split.excluded : split.adapted).push_back(item.value());
  }
  return split;
}

}  // namespace cohort::optim
