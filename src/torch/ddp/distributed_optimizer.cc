#include "cohort/torch/ddp/distributed_optimizer.h"

#include <sstream>
#include <unordered_set>

#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"
#include "ddp/reducer.h"
#include "model_check.h"

namespace cohort {
namespace {

constexpr const char* kDistributedOptimizer = "DistributedOptimizer";

struct NamedParameter {
  std::string name;
  torch::Tensor tensor;
};

// Every parameter of every param group once, named by its place ("param_groups[0][3]").
std::vector<NamedParameter> parameters_of(torch::optim::Optimizer& optimizer) {
  std::vector<NamedParameter> parameters;
  std::unordered_set<const void*> seen;
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!seen.insert(params[i].unsafeGetTensorImpl()).second) continue;
      parameters.push_back({detail::concat("param_groups[", g, "][", i, "]"), params[i]});
    }
  }
  return parameters;
}

// The reducer's options: DDP's, with the fusion threshold as bucket cap and no buffers
// (an optimizer has none).
DdpOptions reducer_options(const DistributedOptimizerOptions& options) {
  DdpOptions ddp;
  ddp.bucket_cap_mb = options.fusion_threshold_mb;
  ddp.first_bucket_cap_mb = options.first_bucket_mb;
  ddp.broadcast_buffers = false;
  ddp.find_unused_parameters = options.find_unused_parameters;
  ddp.gradient_as_bucket_view = options.gradient_as_bucket_view;
  ddp.comm_hook = options.comm_hook;
  ddp.timeline = options.timeline;
  return ddp;
}

}  // namespace

class DistributedOptimizer::Impl {
 public:
  Impl(torch::optim::Optimizer& optimizer, std::shared_ptr<torch::optim::Optimizer> owned,
       std::shared_ptr<Group> group, DistributedOptimizerOptions options)
      : owned_(std::move(owned)),
        optimizer_(optimizer),
        group_(std::move(group)),
        options_(std::move(options)) {
    COHORT_CHECK(group_ != nullptr, kDistributedOptimizer, ": the group is null");
    const auto every_parameter = parameters_of(optimizer_);
    check_same_parameters(every_parameter);
    std::vector<Reducer::Parameter> reduced;
    std::vector<torch::Tensor> all;
    for (const auto& p : every_parameter) {
      all.push_back(p.tensor);
      if (p.tensor.requires_grad()) reduced.push_back({p.name, p.tensor});
    }
    COHORT_CHECK(!reduced.empty(), kDistributedOptimizer,
                 ": the optimizer has no parameter that requires grad; give it the parameters "
                 "to train");
    if (options_.broadcast_parameters) {
      broadcast_coalesced(*group_, all, 0, call_sites::kDdpConstructor);
    }
    // The reducer is DDP's, unchanged: it takes named parameters, and the buffer broadcast it
    // would call is off (an optimizer has no buffers).
    reducer_ = std::make_unique<Reducer>(group_, std::move(reduced), reducer_options(options_),
                                         [](int) {});
  }

  void check_same_parameters(const std::vector<NamedParameter>& parameters) {
    std::vector<std::string> entries;
    for (const auto& p : parameters) {
      std::ostringstream entry;
      entry << p.name << (p.tensor.requires_grad() ? " " : " (frozen) ")
            << c10::toString(p.tensor.scalar_type()) << " " << p.tensor.sizes();
      entries.push_back(entry.str());
    }
    check_same_on_all_ranks(*group_, entries, "parameter", call_sites::kDdpConstructor,
                            kDistributedOptimizer);
  }

  std::shared_ptr<torch::optim::Optimizer> owned_;  // null when the caller owns the optimizer
  torch::optim::Optimizer& optimizer_;
  std::shared_ptr<Group> group_;
  DistributedOptimizerOptions options_;
  std::unique_ptr<Reducer> reducer_;
};

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           std::shared_ptr<Group> group,
                                           DistributedOptimizerOptions options)
    : impl_(std::make_unique<Impl>(optimizer, nullptr, std::move(group), std::move(options))) {}

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           std::shared_ptr<Group> group,
                                           DistributedOptimizerOptions options) {
  COHORT_CHECK(optimizer != nullptr, kDistributedOptimizer, ": the optimizer is null");
  auto& ref = *optimizer;
  impl_ = std::make_unique<Impl>(ref, std::move(optimizer), std::move(group), std::move(options));
}

DistributedOptimizer::~DistributedOptimizer() = default;
DistributedOptimizer::DistributedOptimizer(DistributedOptimizer&&) noexcept = default;
DistributedOptimizer& DistributedOptimizer::operator=(DistributedOptimizer&&) noexcept = default;

torch::Tensor DistributedOptimizer::step(torch::optim::Optimizer::LossClosure closure) {
  COHORT_CHECK(!impl_->reducer_->no_sync(), kDistributedOptimizer,
               ": step() inside a no_sync() guard would apply this rank's own gradients; end "
               "the guard and run the last micro-batch's backward outside it first");
  return impl_->optimizer_.step(std::move(closure));
}

void DistributedOptimizer::zero_grad(bool set_to_none) {
  torch::NoGradGuard no_grad;
  for (auto& param_group : impl_->optimizer_.param_groups()) {
    for (auto& p : param_group.params()) {
      auto& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        grad = torch::Tensor();
      } else {
        grad.detach_();
        grad.zero_();
      }
    }
  }
}

DistributedOptimizer::NoSync DistributedOptimizer::no_sync() {
  return NoSync(impl_->reducer_.get(), kDistributedOptimizer);
}

const IterationStats& DistributedOptimizer::last_iteration_stats() const {
  return impl_->reducer_->last_iteration_stats();
}
std::vector<std::vector<std::string>> DistributedOptimizer::bucket_parameter_names() const {
  return impl_->reducer_->bucket_parameter_names();
}
torch::optim::Optimizer& DistributedOptimizer::optimizer() const {
  return impl_->optimizer_;
}
Group& DistributedOptimizer::group() const {
  return *impl_->group_;
}
const DistributedOptimizerOptions& DistributedOptimizer::options() const {
  return impl_->options_;
}

}  // namespace cohort
