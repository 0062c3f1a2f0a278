// DiLoCo and Streaming DiLoCo (include/cohort/torch/local_sgd/diloco.h).
//
// Note [DiLoCo rounds]
// A round of fragment f: every rank computes its pseudo-gradient, outer - local, for the
// fragment's parameters (in float32, the outer parameters' dtype), packs it into one flat
// buffer, casts it to the wire dtype and starts one averaging allreduce of it. The round is
// applied at once, or overlap_steps inner steps later (the allreduce running meanwhile on the
// group's worker): the average becomes the gradient of the fragment's outer parameters (the
// others' gradients are undefined, so the outer optimizer leaves them and their state alone),
// the outer optimizer steps, and the local parameters of the fragment take the new outer values
// (mixed with their own, with merge_local, after an overlap). With DiLoCoOptions::hook the round
// is the hook's reduction of a GradBucket over the flat float32 pseudo-gradients instead (the
// compression hooks: quantized or sparse, with error feedback per fragment, as per bucket in
// DDP). The inner optimizer's state is each
// rank's own and is not touched. Every rank runs the same rounds at the same steps (the schedule
// depends on the step count only), so the allreduces match.
// Hierarchical (DiLoCoOptions::hierarchical): the reduction runs over `across_`, a group of the
// first rank of every node, and when the round is applied those ranks broadcast the average to
// their node's others, which started no reduction of their own (their pseudo-gradients equal
// their node leader's: the caller's DDP keeps a node's models equal).

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
  // torch's SGD refuses Nesterov without momentum: momentum 0 is plain SGD.
  return std::make_unique<torch::optim::SGD>(
      std::move(parameters), torch::optim::SGDOptions(options.outer_lr)
                                 .momentum(options.outer_momentum)
                                 .nesterov(options.outer_momentum > 0));
}

// Throws InvalidArgument for options DiLoCo cannot run with `parameters`.
void check_options(const DiLoCoOptions& options, const std::vector<torch::Tensor>& parameters) {
  COHORT_CHECK(options.inner_steps >= 1, kDiLoCo, ": inner_steps must be >= 1, got ",
               options.inner_steps);
  COHORT_CHECK(!parameters.empty(), kDiLoCo, ": no trainable parameters");
  COHORT_CHECK(options.fragments >= 1 &&
                   options.fragments <= static_cast<int64_t>(parameters.size()),
               kDiLoCo, ": fragments must be between 1 and the number of trainable parameters (",
               parameters.size(), "), got ", options.fragments);
  COHORT_CHECK(options.overlap_steps >= 0 && options.overlap_steps < options.inner_steps,
               kDiLoCo, ": overlap_steps must be at least 0 and less than inner_steps (",
               options.inner_steps, "), got ", options.overlap_steps);
  COHORT_CHECK(options.outer_lr > 0, kDiLoCo, ": outer_lr must be above 0, got ",
               options.outer_lr);
  COHORT_CHECK(options.outer_momentum >= 0 && options.outer_momentum < 1, kDiLoCo,
               ": outer_momentum must be at least 0 and below 1 (0: plain SGD), got ",
               options.outer_momentum);
  COHORT_CHECK(options.merge_local >= 0 && options.merge_local <= 1, kDiLoCo,
               ": merge_local must be between 0 and 1, got ", options.merge_local);
  COHORT_CHECK(options.wire_dtype == torch::kFloat32 || options.wire_dtype == torch::kBFloat16,
               kDiLoCo, ": wire_dtype must be float32 or bfloat16, got ",
               c10::toString(options.wire_dtype));
  COHORT_CHECK(options.hook == nullptr || options.wire_dtype == torch::kFloat32, kDiLoCo,
               ": a hook decides what the pseudo-gradients travel as; leave wire_dtype float32 "
               "(bf16_compress_hook() sends bfloat16)");
  for (const auto& p : parameters) {
    COHORT_CHECK(p.defined() && p.is_floating_point(), kDiLoCo,
                 ": every parameter must be a floating-point tensor");
  }
}

}  // namespace

DiLoCo::DiLoCo(std::shared_ptr<Group> group, std::vector<torch::Tensor> parameters,
               DiLoCoOptions options)
    : DiLoCo(std::move(group), std::move(parameters), std::move(options), /*agree=*/true) {}

DiLoCo::DiLoCo(std::shared_ptr<Group> group, std::vector<torch::Tensor> parameters,
               DiLoCoOptions options, bool agree)
    : group_(std::move(group)), options_(std::move(options)), parameters_(std::move(parameters)) {
  COHORT_CHECK(group_ != nullptr, kDiLoCo, ": the group is null");
  check_options(options_, parameters_);
  if (agree) {
    local_sgd::check_same_parameters(*group_, parameters_, kDiLoCo);
    broadcast_coalesced(*group_, parameters_, 0, call_sites::kDiLoCoConstructor);
  }
  for (const auto& p : parameters_) {
    outer_parameters_.push_back(p.detach().to(torch::kFloat32, /*non_blocking=*/false,
                                              /*copy=*/true).requires_grad_(true));
  }
  fragment_of_ = cut_fragments(parameters_, options_.fragments);
  members_.resize(static_cast<size_t>(options_.fragments));
  for (size_t i = 0; i < parameters_.size(); ++i)
    members_[static_cast<size_t>(fragment_of_[i])].push_back(i);
  rounds_of_fragment_.assign(static_cast<size_t>(options_.fragments), 0);
  synchronized_at_.assign(static_cast<size_t>(options_.fragments), 0);
  across_ = group_;
  if (options_.hierarchical) {  // collective, both: every rank splits
    CollectiveOptions split;
    split.site = call_sites::kDiLoCoConstructor;
    node_group_ = group_->split(group_->node_rank(), group_->rank(), split);
    across_ = group_->split(node_group_->rank() == 0 ? 0 : -1, group_->rank(), split);
  }
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

DiLoCo::~DiLoCo() {
  // Rounds still in flight must end before the buffers they write go.
  for (auto& round : in_flight_) {
    try {
      if (round.work) round.work->wait();
    } catch (...) {  // a destructor cannot report it; the round is dropped
    }
  }
}

int64_t DiLoCo::step() {
  ++step_;
  apply_due_rounds();
  int64_t started = 0;
  for (int64_t f = 0; f < options_.fragments; ++f) {
    if (!due(f, step_)) continue;
    Round round = start(f);
    ++started;
    if (options_.overlap_steps == 0) {
      apply(round, 0.0);
    } else {
      in_flight_.push_back(std::move(round));
    }
  }
  return started;
}

void DiLoCo::apply_due_rounds() {
  while (!in_flight_.empty() && in_flight_.front().apply_at <= step_) {
    apply(in_flight_.front(), options_.merge_local);
    in_flight_.erase(in_flight_.begin());
  }
}

int64_t DiLoCo::synchronize_all() {
  for (auto& round : in_flight_) apply(round, options_.merge_local);
  in_flight_.clear();
  int64_t started = 0;
  for (int64_t f = 0; f < options_.fragments; ++f) {
    if (synchronized_at_[static_cast<size_t>(f)] == step_) continue;  // no progress to send
    Round round = start(f);
    apply(round, 0.0);
    ++started;
  }
  return started;
}

DiLoCo::Round DiLoCo::start(int64_t fragment) {
  torch::NoGradGuard no_grad;
  Round round;
  round.fragment = fragment;
  round.apply_at = step_ + options_.overlap_steps;
  synchronized_at_[static_cast<size_t>(fragment)] = step_;
  std::vector<torch::Tensor> deltas;
  for (size_t i : members_[static_cast<size_t>(fragment)])
    deltas.push_back((outer_parameters_[i] - parameters_[i].to(torch::kFloat32)).reshape({-1}));
  round.flat = torch::cat(deltas).to(options_.wire_dtype);
  start_reduction(round);
  return round;
}

void DiLoCo::start_reduction(Round& round) {
  if (!across_) return;  // hierarchical, not the node's first rank: apply() receives the average
  if (!options_.hook) {
    CollectiveOptions collective;
    collective.op = ReduceOp::kAvg;
    collective.stream = current_stream(round.flat);
    collective.site = call_sites::kDiLoCoRound;
    round.work = across_->allreduce_async(tensor_buffer(round.flat), collective);
    sent_bytes_ += round.flat.numel() * static_cast<int64_t>(round.flat.element_size());
    return;
  }
  GradBucket bucket;
  bucket.index = static_cast<size_t>(round.fragment);
  bucket.iteration = rounds_of_fragment_[static_cast<size_t>(round.fragment)]++;
  bucket.buffer = round.flat;
  int64_t offset = 0;
  for (size_t i : members_[static_cast<size_t>(round.fragment)]) {
    const torch::Tensor& p = parameters_[i];
    bucket.gradients.push_back(round.flat.narrow(0, offset, p.numel()).view(p.sizes()));
    bucket.parameters.push_back(p);
    offset += p.numel();
  }
  PendingReduction pending = options_.hook->start(*across_, bucket);
  round.work = pending.work;
  round.finish = pending.finish;
  const torch::Tensor reduced = pending.reduced.defined() ? pending.reduced : round.flat;
  sent_bytes_ += pending.wire_bytes ? static_cast<int64_t>(*pending.wire_bytes)
                                    : reduced.numel() * static_cast<int64_t>(reduced.element_size());
}

void DiLoCo::apply(Round& round, double merge_local) {
  if (round.work) round.work->wait();
  if (round.finish) round.finish();
  if (node_group_) {  // the node's first rank has the average: the others take it
    CollectiveOptions collective;
    collective.root = 0;
    collective.stream = current_stream(round.flat);
    collective.site = call_sites::kDiLoCoRound;
    node_group_->broadcast(tensor_buffer(round.flat), collective);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor average = round.flat.to(torch::kFloat32);
  if (round.scale != 1.0) average.mul_(round.scale);
  int64_t offset = 0;
  for (size_t i : members_[static_cast<size_t>(round.fragment)]) {
    torch::Tensor& outer = outer_parameters_[i];
    outer.mutable_grad() = average.narrow(0, offset, outer.numel()).view_as(outer).clone();
    offset += outer.numel();
  }
  outer_->step();
  // The local progress since the round started is dropped (merge_local 0) or kept in part.
  if (merge_local == 0.0) synchronized_at_[static_cast<size_t>(round.fragment)] = step_;
  for (size_t i : members_[static_cast<size_t>(round.fragment)]) {
    outer_parameters_[i].mutable_grad() = torch::Tensor();
    torch::Tensor local = parameters_[i].detach();
    if (merge_local == 0.0) {
      local.copy_(outer_parameters_[i]);
    } else {
      local.copy_(local.to(torch::kFloat32) * merge_local + outer_parameters_[i] * (1 - merge_local));
    }
  }
}

}  // namespace cohort
