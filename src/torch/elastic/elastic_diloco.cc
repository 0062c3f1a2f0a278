// ElasticTrainer's DiLoCo (src/torch/elastic/elastic_diloco.h, Note [Elastic DiLoCo]).
#include "elastic/elastic_diloco.h"

#include "call_sites.h"
#include "coalesced_broadcast.h"
#include "cohort/core/check.h"
#include "cohort/torch/tensor_buffer.h"
#include "elastic/optimizer_broadcast.h"
#include "local_sgd/averaging.h"

namespace cohort::detail {

ElasticDiLoCo::ElasticDiLoCo(torch::nn::Module& module, DiLoCoOptions options)
    : module_(module), options_(std::move(options)) {
  COHORT_CHECK(!options_.hierarchical,
               "ElasticTrainer (DiLoCo): hierarchical DiLoCo is not supported under elastic "
               "membership; leave DiLoCoOptions::hierarchical false");
  COHORT_CHECK(options_.overlap_steps == 0,
               "ElasticTrainer (DiLoCo): a round in flight across steps cannot be redone over a "
               "new generation; leave DiLoCoOptions::overlap_steps 0, got ",
               options_.overlap_steps);
}

ElasticDiLoCo::~ElasticDiLoCo() {
  drop_rounds();
}

void ElasticDiLoCo::drop_rounds() {
  if (!diloco_) return;
  for (DiLoCo::Round& round : diloco_->in_flight_) {
    try {
      if (round.work) round.work->wait();  // its buffer must outlive the transport's writes
    } catch (const std::exception&) {      // the failure the generation is dropped for
    }
    if (options_.hook) --diloco_->rounds_of_fragment_[static_cast<size_t>(round.fragment)];
    // Its progress was not sent: the fragment is unsynchronized until a round is redone.
    diloco_->synchronized_at_[static_cast<size_t>(round.fragment)] = -1;
  }
  diloco_->in_flight_.clear();
}

void ElasticDiLoCo::adopt(std::shared_ptr<Group> group) {
  drop_rounds();
  if (!diloco_) {  // the models were compared at the rendezvous; heal() gives rank 0's state
    diloco_.reset(new DiLoCo(std::move(group), local_sgd::trainable_parameters(module_), options_,
                             /*agree=*/false));
    return;
  }
  diloco_->group_ = group;
  diloco_->across_ = std::move(group);
}

void ElasticDiLoCo::heal(Group& group, bool receiver) {
  DiLoCo& d = diloco();
  broadcast_coalesced(group, d.outer_parameters_, 0, call_sites::kElasticHeal);
  broadcast_optimizer_state(group, *d.outer_);
  // Per fragment: its round count (a hook's iteration) and where it was last synchronized.
  const auto fragments = static_cast<int64_t>(d.rounds_of_fragment_.size());
  auto counts = torch::cat({torch::tensor(d.rounds_of_fragment_, torch::kInt64),
                            torch::tensor(d.synchronized_at_, torch::kInt64)});
  CollectiveOptions root0;
  root0.site = call_sites::kElasticHeal;
  group.broadcast(tensor_buffer(counts), root0);
  const int64_t* received = counts.data_ptr<int64_t>();
  d.rounds_of_fragment_.assign(received, received + fragments);
  d.synchronized_at_.assign(received + fragments, received + 2 * fragments);
  // The buffers (running statistics) are each member's own, as DiLoCo leaves them: a member
  // that keeps its state receives into copies.
  std::vector<torch::Tensor> buffers = module_.buffers();
  if (!receiver) {
    for (auto& buffer : buffers) buffer = buffer.detach().clone();
  }
  broadcast_coalesced(group, buffers, 0, call_sites::kElasticHeal);
  if (!receiver) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < d.parameters_.size(); ++i) d.parameters_[i].copy_(d.outer_parameters_[i]);
  has_progress_ = false;
}

bool ElasticDiLoCo::synchronizes_at(int64_t step) const {
  for (int64_t f = 0; f < options_.fragments; ++f) {
    if (diloco_->due(f, step + 1)) return true;  // DiLoCo counts the step after it
  }
  return false;
}

void ElasticDiLoCo::reduce_rounds(int64_t step, bool redo) {
  reduce_rounds_where(step, redo, [this](int64_t f, int64_t s) { return diloco_->due(f, s); });
}

bool ElasticDiLoCo::needs_synchronization(int64_t committed) const {
  for (int64_t at : diloco_->synchronized_at_) {
    if (at < committed) return true;
  }
  return false;
}

void ElasticDiLoCo::reduce_unsynchronized(int64_t committed, bool redo) {
  // A fragment's entry moves only when its own round starts: each is read before that.
  reduce_rounds_where(committed, redo, [this](int64_t f, int64_t s) {
    return diloco_->synchronized_at_[static_cast<size_t>(f)] < s - 1;
  });
}

void ElasticDiLoCo::reduce_rounds_where(int64_t step, bool redo,
                                        const std::function<bool(int64_t, int64_t)>& starts) {
  DiLoCo& d = diloco();
  const double scale = redo ? scale_for_members_with_progress(*d.group_) : 1.0;
  d.step_ = step + 1;
  for (int64_t f = 0; f < options_.fragments; ++f) {
    if (!starts(f, d.step_)) continue;
    d.in_flight_.push_back(d.start(f));
    d.in_flight_.back().scale = scale;
  }
  finish_reductions();
}

void ElasticDiLoCo::note_progress(int64_t step) {
  has_progress_ = true;
  diloco().step_ = step + 1;
}

// Every collective of the rounds ends before the vote (a hook's finish may be one: PowerSGD's
// second allreduce), so that what follows the vote is local and cannot fail for a peer.
void ElasticDiLoCo::finish_reductions() {
  DiLoCo& d = diloco();
  for (DiLoCo::Round& round : d.in_flight_) {
    if (round.work) round.work->wait();
    if (round.finish) round.finish();
    round.work = nullptr;
    round.finish = nullptr;
  }
}

void ElasticDiLoCo::apply_rounds() {
  DiLoCo& d = diloco();
  for (DiLoCo::Round& round : d.in_flight_) d.apply(round, 0.0);
  d.in_flight_.clear();
}

// The rounds average over every member; those without progress send zeros, so the average of
// the others' is the group's times size / (members with progress).
double ElasticDiLoCo::scale_for_members_with_progress(Group& group) {
  auto count = torch::tensor({has_progress_ ? int64_t{1} : int64_t{0}}, torch::kInt64);
  CollectiveOptions sum;
  sum.site = call_sites::kDiLoCoRound;
  group.allreduce(tensor_buffer(count), sum);
  const int64_t with_progress = count.item<int64_t>();
  return with_progress > 0 ? static_cast<double>(group.size()) / static_cast<double>(with_progress)
                           : 1.0;
}

DiLoCo& ElasticDiLoCo::diloco() {
  COHORT_CHECK(diloco_ != nullptr, "ElasticTrainer (DiLoCo): no generation formed yet");
  return *diloco_;
}

}  // namespace cohort::detail
