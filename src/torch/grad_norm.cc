#include "grad_norm.h"

#include <cmath>
#include <limits>
#include <vector>

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/torch/sharded_parameters.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {

double sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group, double norm_type,
                         bool* any_rank_flag, const std::vector<AgreedValue>& agreed) {
  COHORT_CHECK(norm_type >= 1 || std::isinf(norm_type),
               "clip_grad_norm: norm_type must be >= 1 or infinity, got ", norm_type);
  const bool infinity = std::isinf(norm_type);
  // Each rank's part: the largest magnitude, or the sum of |g|^p. In float64, so that summing
  // over ranks loses nothing that one process's float32 norm keeps.
  double local = 0;
  for (const auto& tensor : tensors) {
    const auto& grad = tensor.grad();
    if (!grad.defined() || grad.numel() == 0) continue;
    const double norm = grad.norm(norm_type).item<double>();
    local = infinity ? std::max(local, norm) : local + std::pow(norm, norm_type);
  }
  // The flag rides along as 0 or 1: a sum or a max of them is > 0 when any rank's was 1.
  std::vector<double> values = {local};
  if (any_rank_flag != nullptr) values.push_back(*any_rank_flag ? 1.0 : 0.0);
  const size_t agreed_at = values.size();
  append_agreed(values, agreed, infinity);
  auto total = torch::tensor(values, torch::kFloat64);
  CollectiveOptions options;
  options.op = infinity ? ReduceOp::kMax : ReduceOp::kSum;
  options.site = call_sites::kGradNorm;
  group.allreduce(tensor_buffer(total), options);
  const std::vector<double> totals(total.data_ptr<double>(),
                                   total.data_ptr<double>() + total.numel());
  check_agreed(totals, agreed_at, agreed, infinity, group.size());
  if (any_rank_flag != nullptr) *any_rank_flag = totals[1] > 0;
  const double combined = totals[0];
  return infinity ? combined : std::pow(combined, 1.0 / norm_type);
}

double clip_sharded_grad_norm(const std::vector<torch::Tensor>& tensors, Group& group,
                              double max_norm, double norm_type, bool* any_rank_flag,
                              std::vector<AgreedValue> agreed) {
  agreed.push_back({"clip_grad_norm's max_norm", max_norm});
  const double norm = sharded_grad_norm(tensors, group, norm_type, any_rank_flag, agreed);
  if (any_rank_flag != nullptr && *any_rank_flag) return norm;
  const double coefficient = max_norm / (norm + 1e-6);
  if (coefficient < 1) {
    torch::NoGradGuard no_grad;
    for (const auto& tensor : tensors) {
      if (tensor.grad().defined()) tensor.grad().mul_(coefficient);
    }
  }
  return norm;
}

double clip_grad_norm(const ShardedParameters& sharded, double max_norm, double norm_type) {
  if (sharded.norm_group == nullptr) {  // whole parameters, equal on every rank
    return torch::nn::utils::clip_grad_norm_(sharded.shards, max_norm, norm_type);
  }
  return clip_sharded_grad_norm(sharded.shards, *sharded.norm_group, max_norm, norm_type);
}

}  // namespace cohort
