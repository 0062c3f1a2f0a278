#include "elastic/buddy_log.h"

#include <utility>

#include "cohort/core/check.h"
#include "elastic/buddy_copy.h"

namespace cohort::detail {

const torch::Tensor& BuddyLog::incoming(int64_t elements) {
  if (incoming_.defined() && incoming_.numel() == elements) return incoming_;
  incoming_ = torch::Tensor();
  while (!spare_.empty() && !incoming_.defined()) {
    torch::Tensor buffer = std::move(spare_.back());
    spare_.pop_back();
    if (buffer.numel() == elements) incoming_ = std::move(buffer);
  }
  if (!incoming_.defined()) incoming_ = torch::empty({elements});
  return incoming_;
}

void BuddyLog::commit_incoming(const torch::optim::Optimizer& stepped_with) {
  COHORT_INTERNAL_ASSERT(incoming_.defined(), "a buddy step committed without its gradients");
  Entry entry;
  entry.gradients = std::move(incoming_);
  incoming_ = torch::Tensor();
  for (const auto& group : stepped_with.param_groups()) {
    entry.options.push_back(group.options().clone());
  }
  entries_.push_back(std::move(entry));
}

void BuddyLog::drop_incoming() {
  if (incoming_.defined()) spare_.push_back(std::move(incoming_));
  incoming_ = torch::Tensor();
}

void BuddyLog::replay(HeldPieces& copy) {
  torch::NoGradGuard no_grad;
  for (auto& entry : entries_) {
    unpack_gradients(entry.gradients, copy.holdings);
    auto& groups = copy.optimizer->param_groups();
    COHORT_INTERNAL_ASSERT(groups.size() == entry.options.size(), "a buddy copy of ", groups.size(),
                           " param groups logged with ", entry.options.size());
    for (size_t g = 0; g < groups.size(); ++g) groups[g].set_options(std::move(entry.options[g]));
    copy.optimizer->step();
  }
  // The gradients were views of the log's buffers: the copy lets go of them before reuse.
  for (auto& shard : copy.holdings.shards) shard.tensor.mutable_grad() = torch::Tensor();
  clear();
}

void BuddyLog::clear() {
  for (auto& entry : entries_) spare_.push_back(std::move(entry.gradients));
  entries_.clear();
}

void BuddyLog::reset() {
  entries_.clear();
  spare_.clear();
  incoming_ = torch::Tensor();
}

}  // namespace cohort::detail
