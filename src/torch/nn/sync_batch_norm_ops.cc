#include "sync_batch_norm_ops.h"

#include <vector>

#include "call_sites.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::nn::detail {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Every dimension but the channels (1).
std::vector<int64_t> non_channel_dims(const torch::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// (C) -> (1, C, 1, ...) to broadcast against the input.
torch::Tensor per_channel(const torch::Tensor& values, const torch::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = values.numel();
  return values.view(shape);
}

torch::ScalarType stats_dtype(const torch::Tensor& input) {
  return input.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Sums `packed` (float64) over the group, on the input's device where the group takes device
// buffers (NCCL), else through host memory: the vectors are a few values per channel.
torch::Tensor allreduce_sums(torch::Tensor packed, const torch::Tensor& like, Group& group,
                             CallSite site) {
  CollectiveOptions options;
  options.site = site;
  if (like.is_cuda() && group.takes_device_buffers()) {
    options.stream = current_stream(like);
    group.allreduce(tensor_buffer(packed), options);
    return packed;
  }
  torch::Tensor host = packed.to(torch::kCPU).contiguous();
  group.allreduce(tensor_buffer(host), options);
  return host.to(like.device());
}

// Holds the group in the autograd graph (saved_data takes IValues only).
struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(std::shared_ptr<Group> g) : group(std::move(g)) {}
  std::shared_ptr<Group> group;
};

// Note [Global statistics]
// Sums of squares lose the variance to cancellation when the mean is large against the
// deviation. Each rank therefore computes its own mean and (biased) variance with torch's
// two-pass var_mean, and turns them into sums n*mean and n*(var + mean^2) only in float64 for
// the allreduce; the global variance sumsq/N - mean^2 is then taken in float64 too, where the
// cancellation costs ~1e-16 relative to sumsq, far below float32's resolution. Counts are
// summed beside the sums, so ranks of different batch sizes (0 included) weigh exactly by their
// number of values: the result is the statistics of the concatenated global batch.
torch::Tensor local_sums(const torch::Tensor& input) {
  const int64_t channels = input.size(1);
  const int64_t count = channels > 0 ? input.numel() / channels : 0;
  torch::Tensor packed = torch::zeros({2 * channels + 1}, input.options().dtype(torch::kDouble));
  if (count == 0) return packed;
  torch::Tensor var, mean;
  std::tie(var, mean) = torch::var_mean(input.to(stats_dtype(input)), non_channel_dims(input),
                                        /*unbiased=*/false, /*keepdim=*/false);
  const torch::Tensor n_mean = mean.to(torch::kDouble) * double(count);
  packed[0] = double(count);
  packed.slice(0, 1, channels + 1).copy_(n_mean);
  packed.slice(0, channels + 1)
      .copy_((var.to(torch::kDouble) + mean.to(torch::kDouble).square()) * double(count));
  return packed;
}

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& mean, const torch::Tensor& invstd,
                               int64_t count, std::shared_ptr<Group> group) {
    ctx->save_for_backward({input, weight, mean, invstd});
    ctx->saved_data["count"] = count;
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(group));
    torch::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(invstd.scalar_type());
    torch::Tensor out = (input - per_channel(mean, input)) * per_channel(scale, input);
    if (bias.defined()) out = out + per_channel(bias.to(invstd.scalar_type()), input);
    return out.to(input.scalar_type());
  }

  // With xmu = x - mean over the global batch of N values per channel:
  //   dx = w * invstd * (dy - sum(dy)/N - xmu * invstd^2 * sum(dy * xmu)/N)
  // where the sums run over the global batch (allreduced); dw = sum(dy * xmu) * invstd and
  // db = sum(dy) over this rank's batch only, since DDP averages parameter gradients itself.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const int64_t count = ctx->saved_data["count"].toInt();
    const torch::ScalarType dtype = invstd.scalar_type();
    const torch::Tensor dy = grad_outputs[0].to(dtype);
    const torch::Tensor xmu = input.to(dtype) - per_channel(mean, input);
    const std::vector<int64_t> dims = non_channel_dims(input);
    const torch::Tensor sum_dy = dy.sum(dims);
    const torch::Tensor sum_dy_xmu = (dy * xmu).sum(dims);

    torch::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(1)) grad_weight = (sum_dy_xmu * invstd).to(weight.scalar_type());
    if (ctx->needs_input_grad(2))
      grad_bias = sum_dy.to(weight.defined() ? weight.scalar_type() : dtype);
    if (ctx->needs_input_grad(0)) {
      auto capsule = ctx->saved_data["group"].toCapsule();
      Group& group = *static_cast<GroupCapsule*>(capsule.get())->group;
      const torch::Tensor sums = allreduce_sums(torch::cat({sum_dy, sum_dy_xmu}).to(torch::kDouble),
                                                input, group, call_sites::kSyncBatchNormBackward);
      const int64_t channels = sum_dy.numel();
      const torch::Tensor mean_dy = (sums.slice(0, 0, channels) / double(count)).to(dtype);
      const torch::Tensor mean_dy_xmu = (sums.slice(0, channels) / double(count)).to(dtype);
      torch::Tensor scale = invstd;
      if (weight.defined()) scale = scale * weight.to(dtype);
      grad_input = (dy - per_channel(mean_dy, input) -
                    xmu * per_channel(invstd.square() * mean_dy_xmu, input)) *
                   per_channel(scale, input);
      grad_input = grad_input.to(input.scalar_type());
    }
    return {grad_input,      grad_weight,     grad_bias,      torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

GlobalBatchStats global_batch_stats(const torch::Tensor& input, Group& group, double eps) {
  const int64_t channels = input.size(1);
  const torch::Tensor sums =
      allreduce_sums(local_sums(input), input, group, call_sites::kSyncBatchNormForward);
  GlobalBatchStats stats;
  stats.count = static_cast<int64_t>(sums[0].item<double>());
  COHORT_CHECK(stats.count > 1,
               "SyncBatchNorm: expected more than 1 value per channel when "
               "training, got ",
               stats.count, " across the ", group.size(),
               " ranks of the group (this rank's input has shape ", input.sizes(),
               "); give the group more samples, or put the layer in eval mode");
  const torch::Tensor mean = sums.slice(0, 1, channels + 1) / double(stats.count);
  const torch::Tensor var =
      (sums.slice(0, channels + 1) / double(stats.count) - mean.square()).clamp_min(0);
  const torch::ScalarType dtype = stats_dtype(input);
  stats.mean = mean.to(dtype);
  stats.var = var.to(dtype);
  stats.invstd = (var + eps).rsqrt().to(dtype);
  return stats;
}

torch::Tensor sync_batch_norm(const torch::Tensor& input, const torch::Tensor& weight,
                              const torch::Tensor& bias, const GlobalBatchStats& stats,
                              std::shared_ptr<Group> group) {
  return SyncBatchNormFunction::apply(input, weight, bias, stats.mean, stats.invstd, stats.count,
                                      std::move(group));
}

}  // namespace cohort::nn::detail
