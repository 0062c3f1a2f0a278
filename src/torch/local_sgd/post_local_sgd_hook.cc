#include "cohort/core/check.h"
#include "cohort/torch/local_sgd.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort {
namespace {

class PostLocalSgdHook final : public CommHook {
 public:
  PostLocalSgdHook(int64_t start_step, std::shared_ptr<Group> local_group)
      : start_step_(start_step), local_group_(std::move(local_group)) {}

  PendingReduction start(Group& group, GradBucket& bucket) override {
    if (bucket.iteration < start_step_) return allreduce_on(group, bucket);
    if (local_group_) return allreduce_on(*local_group_, bucket);
    // Local phase without a local group: the gradient stays this rank's own. Nothing is sent
    // (an empty `reduced` makes the bucket's statistics say 0 bytes on the wire).
    auto done = std::make_shared<Work>("post_local_sgd: no reduction (local phase)");
    done->mark_started();
    done->mark_done();
    return {std::move(done), nullptr, torch::empty({0}, bucket.buffer.options())};
  }
  std::string name() const override { return "post_local_sgd"; }

 private:
  static PendingReduction allreduce_on(Group& group, GradBucket& bucket) {
    CollectiveOptions options;
    options.op = ReduceOp::kAvg;
    options.site = CallSite::kDdpGradients;
    options.stream = current_stream(bucket.buffer);
    return {group.allreduce_async(tensor_buffer(bucket.buffer), options), nullptr, {}};
  }

  int64_t start_step_;
  std::shared_ptr<Group> local_group_;
};

}  // namespace

std::shared_ptr<CommHook> post_local_sgd_hook(int64_t start_step,
                                              std::shared_ptr<Group> local_group) {
  COHORT_CHECK(start_step >= 0, "post_local_sgd_hook: start_step (the iteration from which "
               "gradients stop being averaged over the whole group) must be >= 0, got ",
               start_step);
  return std::make_shared<PostLocalSgdHook>(start_step, std::move(local_group));
}

}  // namespace cohort
