#include "cohort/torch/amp/grad_scaler.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "amp/unscale.h"
#include "call_sites.h"
#include "cohort/comm/group.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"
#include "grad_norm.h"

namespace cohort::amp {
namespace {

std::vector<torch::Tensor> gradients_of(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> grads;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& parameter : group.params()) {
      if (parameter.grad().defined()) grads.push_back(parameter.grad());
    }
  }
  return grads;
}

// True on every rank when `local` is true on any rank of `group`; and the `agreed` values
// checked on the same allreduce (Note [Values that ride along]). Collective.
bool any_rank(Group& group, bool local, const std::vector<AgreedValue>& agreed) {
  std::vector<double> message = {local ? 1.0 : 0.0};
  append_agreed(message, agreed, /*max=*/true);
  auto reduced = torch::tensor(message, torch::kFloat64);
  CollectiveOptions options;
  options.op = ReduceOp::kMax;
  options.site = call_sites::kGradScaler;
  group.allreduce(tensor_buffer(reduced), options);
  const std::vector<double> values(reduced.data_ptr<double>(),
                                   reduced.data_ptr<double>() + reduced.numel());
  check_agreed(values, 1, agreed, /*max=*/true, group.size());
  return values[0] > 0;
}

// What the ranks' scalers must agree on under ZeRO and FSDP, where each unscales its own shards:
// a rank of another scale or schedule would step parameters the others do not (issue 35).
std::vector<AgreedValue> scaler_values(const GradScalerOptions& options, float scale,
                                       int64_t growth_tracker) {
  return {{"GradScaler scale", scale},
          {"GradScaler growth_tracker", static_cast<double>(growth_tracker)},
          {"GradScalerOptions::growth_factor", options.growth_factor},
          {"GradScalerOptions::backoff_factor", options.backoff_factor},
          {"GradScalerOptions::growth_interval", static_cast<double>(options.growth_interval)}};
}

}  // namespace

// Note [Sharded overflow]: under ZeRO and FSDP (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD) a rank
// unscales only its shards, so an inf in one rank's block is seen by that rank only; a rank
// that stepped while another skipped would hold parameters the others do not, and the next
// all-gather would mix them. The finding is reduced (max) over the group before anyone steps.
// Under NO_SHARD (DDP inside) the averaged gradients are whole and equal on every rank: no
// reduction. `norm_group` is where the gradient norm is summed (one replica's shards under
// HYBRID_SHARD, whose replicas hold equal gradients after their average, so one replica's
// finding is every replica's); null under NO_SHARD, whose gradients are whole. Both groups come
// from the wrapper's ShardedParameters (flag_group, norm_group).

// Note [One allreduce for the norm and the overflow]: clipping under ZeRO/FSDP already
// allreduces each rank's part of the norm; the overflow flag travels in the same message
// (grad_norm.h), so a scaled, clipped step costs one small collective, as an unscaled one.

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  COHORT_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0,
               "GradScaler: init_scale must be finite and > 0, got ", options.init_scale);
  COHORT_CHECK(options.growth_factor > 1, "GradScaler: growth_factor must be > 1, got ",
               options.growth_factor);
  COHORT_CHECK(options.backoff_factor > 0 && options.backoff_factor < 1,
               "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  COHORT_CHECK(options.growth_interval >= 1, "GradScaler: growth_interval must be >= 1, got ",
               options.growth_interval);
}

torch::Tensor GradScaler::scale(const torch::Tensor& loss) const {
  if (!options_.enabled) return loss;
  return loss * torch::scalar_tensor(scale_, loss.options().dtype(torch::kFloat));
}

namespace {

void refuse_second(bool already, const char* call, const char* what) {
  if (!already) return;
  throw InvalidArgument(std::string("GradScaler::") + call + ": " + what +
                        " was already called on this optimizer since the last update(); call "
                        "update() after every step");
}

}  // namespace

GradScaler::Record& GradScaler::unscale(torch::optim::Optimizer& optimizer, Group* flag_group,
                                        const char* call) {
  Record& record = records_[&optimizer];
  refuse_second(record.unscaled, call, "unscale_()");
  refuse_second(record.stepped, call, "step()");
  record.unscaled = true;
  record.found_inf = unscale_and_find_non_finite(gradients_of(optimizer),
                                                 static_cast<float>(1.0 / double(scale_)));
  record.undecided = flag_group;
  return record;
}

bool GradScaler::step_through(torch::optim::Optimizer& optimizer, Group* flag_group,
                              const std::function<void()>& step) {
  if (!options_.enabled) {
    step();
    return true;
  }
  Record& record = records_[&optimizer];
  if (!record.unscaled) unscale(optimizer, flag_group, "step");
  refuse_second(record.stepped, "step", "step()");
  decide(record);
  record.stepped = true;
  if (record.found_inf) return false;
  step();
  return true;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (options_.enabled) unscale(optimizer, nullptr, "unscale_");
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  return step_through(optimizer, nullptr, [&optimizer] { optimizer.step(); });
}

void GradScaler::decide(Record& record) const {
  if (record.undecided == nullptr) return;
  record.found_inf = any_rank(*record.undecided, record.found_inf,
                              scaler_values(options_, scale_, growth_tracker_));
  record.undecided = nullptr;
}

void GradScaler::unscale_(const ShardedParameters& sharded, torch::optim::Optimizer& optimizer) {
  if (options_.enabled) unscale(optimizer, sharded.flag_group, "unscale_");
}

double GradScaler::clip_grad_norm(const ShardedParameters& sharded,
                                  torch::optim::Optimizer& optimizer, double max_norm,
                                  double norm_type) {
  if (options_.enabled) {
    Record& record = records_[&optimizer];
    if (!record.unscaled) unscale(optimizer, sharded.flag_group, "clip_grad_norm");
    if (record.undecided != nullptr) {  // Note [One allreduce for the norm and the overflow]
      bool any_overflow = record.found_inf;
      const double norm =
          clip_sharded_grad_norm(sharded.shards, *sharded.norm_group, max_norm, norm_type,
                                 &any_overflow, scaler_values(options_, scale_, growth_tracker_));
      record.found_inf = any_overflow;
      record.undecided = nullptr;
      return norm;
    }
  }
  return cohort::clip_grad_norm(sharded, max_norm, norm_type);
}

bool GradScaler::step(const ShardedParameters& sharded, torch::optim::Optimizer& optimizer) {
  return step_through(optimizer, sharded.flag_group, [&] { sharded.step(optimizer); });
}

// PyTorch's _amp_update_scale_, on the host: the finding of every optimizer since the last
// update decides; growth and backoff are float32 multiplications, as on PyTorch's scale tensor.
void GradScaler::update() {
  if (!options_.enabled) return;
  COHORT_CHECK(!records_.empty(),
               "GradScaler::update: no optimizer was unscaled or stepped since the last "
               "update(): call step(optimizer) before update()");
  bool found = false;
  for (auto& [optimizer, record] : records_) {
    decide(record);
    found |= record.found_inf;
  }
  records_.clear();
  if (found) {
    scale_ = scale_ * static_cast<float>(options_.backoff_factor);
    growth_tracker_ = 0;
    return;
  }
  const int64_t successful = growth_tracker_ + 1;
  if (successful == options_.growth_interval) {
    const float grown = scale_ * static_cast<float>(options_.growth_factor);
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  } else {
    growth_tracker_ = successful;
  }
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  COHORT_CHECK(std::isfinite(new_scale) && new_scale > 0,
               "GradScaler::update: the new scale must be finite and > 0, got ", new_scale);
  records_.clear();
  scale_ = static_cast<float>(new_scale);
}

double GradScaler::get_scale() const {
  return options_.enabled ? static_cast<double>(scale_) : 1.0;
}

void GradScaler::load_state(const GradScalerState& state) {
  COHORT_CHECK(state.valid(),
               "GradScaler::load_state: the scale must be finite and > 0 and the "
               "growth count >= 0, got scale ",
               state.scale, " and growth count ", state.growth_tracker);
  records_.clear();
  scale_ = static_cast<float>(state.scale);
  growth_tracker_ = state.growth_tracker;
}

}  // namespace cohort::amp
