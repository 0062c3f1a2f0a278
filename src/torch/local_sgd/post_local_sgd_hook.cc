#include "cohort/core/check.h"
#include "cohort/torch/local_sgd/local_sgd.h"

namespace cohort {
namespace {

class PostLocalSgdHook final : public CommHook {
 public:
  PostLocalSgdHook(int64_t start_step, std::shared_ptr<Group> local_group)
      : start_step_(start_step), local_group_(std::move(local_group)) {}

  PendingReduction start(Group& group, GradBucket& bucket) override {
    if (bucket.iteration < start_step_) return allreduce_->start(group, bucket);
    if (local_group_) return allreduce_->start(*local_group_, bucket);
    // Local phase without a local group: the gradient stays this rank's own; nothing is sent.
    auto done = std::make_shared<Work>("post_local_sgd: no reduction (local phase)");
    done->mark_started();
    done->mark_done();
    return {std::move(done), nullptr, {}, size_t{0}};
  }
  std::string name() const override { return "post_local_sgd"; }

 private:
  int64_t start_step_;
  std::shared_ptr<Group> local_group_;
  std::shared_ptr<CommHook> allreduce_ = allreduce_hook();
};

}  // namespace

std::shared_ptr<CommHook> post_local_sgd_hook(int64_t start_step,
                                              std::shared_ptr<Group> local_group) {
  COHORT_CHECK(start_step >= 0,
               "post_local_sgd_hook: start_step (the iteration from which "
               "gradients stop being averaged over the whole group) must be >= 0, got ",
               start_step);
  return std::make_shared<PostLocalSgdHook>(start_step, std::move(local_group));
}

}  // namespace cohort
