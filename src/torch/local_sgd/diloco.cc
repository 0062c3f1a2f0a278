// DiLoCo and Streaming DiLoCo (include/cohort/torch/local_sgd/diloco.h).
//
// Note [DiLoCo rounds]
// A round of fragment f: every rank computes its pseudo-gradient, outer - local, for the
// fragment's parameters (in float32, the outer parameters' dtype), packs it into one flat
// buffer, casts it to the wire dtype and averages it with one allreduce; the average becomes the
// gradient of the fragment's outer parameters (the others' gradients are undefined, so the
// outer optimizer leaves them and their state alone), the outer optimizer steps, and the local
// parameters of the fragment take the new outer values. The inner optimizer's state is each
// rank's own and is not touched. Every rank runs the same rounds at the same steps (the schedule
// depends on the step count only), so the allreduces match.

#include "cohort/torch/local_sgd/diloco.h"

#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "local_sgd/averaging.h"

namespace cohort {
namespace {

constexpr const char* kDiLoCo = "DiLoCo";

// Fragment of each parameter: runs of consecutive parameters of about total / F elements.
std::vector<int64_t> cut_fragments(const std::vector<torch::Tensor>& parameters, int64_t count) {
  int64_t total = 0;
  for (const auto& p : parameters) total += p.numel();
  std::vector<int64_t> fragment_of;
  int64_t before = 0;
  for (size_t i = 0; i < parameters.size(); ++i) {
    // The fragment in whose share of the elements this parameter's middle falls, but never
    // fewer parameters left than fragments still to fill.
    const int64_t middle = before + parameters[i].numel() / 2;
    int64_t f = total > 0 ? std::min<int64_t>(count - 1, middle * count / total) : 0;
    const int64_t left = static_cast<int64_t>(parameters.size() - i);
    const int64_t previous = fragment_of.empty() ? -1 : fragment_of.back();
    f = std::max(f, previous);
    f = std::max(f, count - left);   // the fragments after this one each still need one
    f = std::min(f, previous + 1);   // no fragment left empty
    fragment_of.push_back(f);
    before += parameters[i].numel();
  }
  return fragment_of;
}

std::unique_ptr<torch::optim::Optimizer> default_outer(std::vector<torch::Tensor> parameters,
                                                       const DiLoCoOptions& options) {
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters),
      torch::optim::SGDOptions(options.outer_lr).momentum(options.outer_momentum).nesterov(true));
}

}  // namespace

DiLoCo::DiLoCo(std::shared_ptr<Group> group, std::vector<torch::Tensor> parameters,
               DiLoCoOptions options)
    : group_(std::move(group)), options_(std::move(options)), parameters_(std::move(parameters)) {
  COHORT_CHECK(group_ != nullptr, kDiLoCo, ": the group is null");
  COHORT_CHECK(options_.inner_steps >= 1, kDiLoCo, ": inner_steps must be >= 1, got ",
               options_.inner_steps);
  COHORT_CHECK(!parameters_.empty(), kDiLoCo, ": no trainable parameters");
  COHORT_CHECK(options_.fragments >= 1 &&
                   options_.fragments <= static_cast<int64_t>(parameters_.size()),
               kDiLoCo, ": fragments must be between 1 and the number of trainable parameters (",
               parameters_.size(), "), got ", options_.fragments);
  COHORT_CHECK(options_.wire_dtype == torch::kFloat32 || options_.wire_dtype == torch::kBFloat16,
               kDiLoCo, ": wire_dtype must be float32 or bfloat16, got ",
               c10::toString(options_.wire_dtype));
  for (const auto& p : parameters_) {
    COHORT_CHECK(p.defined() && p.is_floating_point(), kDiLoCo,
                 ": every parameter must be a floating-point tensor");
  }
  local_sgd::check_same_parameters(*group_, parameters_, kDiLoCo);
  broadcast_coalesced(*group_, parameters_, 0, call_sites::kDiLoCoConstructor);
  for (const auto& p : parameters_) {
    outer_parameters_.push_back(p.detach().to(torch::kFloat32, /*non_blocking=*/false,
                                              /*copy=*/true).requires_grad_(true));
  }
  fragment_of_ = cut_fragments(parameters_, options_.fragments);
  outer_ = options_.outer_optimizer ? options_.outer_optimizer(outer_parameters_)
                                    : default_outer(outer_parameters_, options_);
  COHORT_CHECK(outer_ != nullptr, kDiLoCo, ": outer_optimizer returned null");
}

DiLoCo::DiLoCo(std::shared_ptr<Group> group, torch::nn::Module& module, DiLoCoOptions options)
    : DiLoCo(std::move(group), local_sgd::trainable_parameters(module), std::move(options)) {}

bool DiLoCo::due(int64_t fragment, int64_t step) const {
  const int64_t h = options_.inner_steps;
  return step % h == (fragment * h / options_.fragments) % h;
}

int64_t DiLoCo::step() {
  ++step_;
  int64_t synchronized = 0;
  for (int64_t f = 0; f < options_.fragments; ++f) {
    if (!due(f, step_)) continue;
    synchronize(f);
    ++synchronized;
  }
  return synchronized;
}

void DiLoCo::synchronize_all() {
  for (int64_t f = 0; f < options_.fragments; ++f) synchronize(f);
}

void DiLoCo::synchronize(int64_t fragment) {
  torch::NoGradGuard no_grad;
  std::vector<size_t> members;
  std::vector<torch::Tensor> deltas;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (fragment_of_[i] != fragment) continue;
    members.push_back(i);
    deltas.push_back((outer_parameters_[i] - parameters_[i].to(torch::kFloat32)).reshape({-1}));
  }
  torch::Tensor flat = torch::cat(deltas).to(options_.wire_dtype);
  CollectiveOptions collective;
  collective.op = ReduceOp::kAvg;
  collective.stream = current_stream(flat);
  collective.site = call_sites::kDiLoCoRound;
  if (group_->size() > 1) group_->allreduce(tensor_buffer(flat), collective);
  sent_bytes_ += flat.numel() * static_cast<int64_t>(flat.element_size());
  flat = flat.to(torch::kFloat32);
  int64_t offset = 0;
  for (size_t i : members) {
    torch::Tensor& outer = outer_parameters_[i];
    outer.mutable_grad() = flat.narrow(0, offset, outer.numel()).view_as(outer).clone();
    offset += outer.numel();
  }
  outer_->step();
  for (size_t i : members) {
    outer_parameters_[i].mutable_grad() = torch::Tensor();
    parameters_[i].detach().copy_(outer_parameters_[i]);
  }
}

}  // namespace cohort
