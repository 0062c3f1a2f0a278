#include "elastic_loop.h"

#include <chrono>
#include <cstdio>
#include <string>

#include "cohort/core/error.h"

namespace cohort_examples {

void refuse_for_elastic(bool set, const char* what) {
  if (!set) return;
  throw cohort::InvalidArgument(
      std::string("--elastic trains with DDP in float32 from memory; it does not take ") + what);
}

cohort::ElasticTrainerOptions elastic_trainer_options(const ElasticRunSettings& settings) {
  cohort::ElasticTrainerOptions options;
  options.sampler.global_batch = static_cast<size_t>(settings.global_batch);
  options.sampler.seed = settings.seed;
  options.ddp.bucket_cap_mb = settings.bucket_cap_mb;
  return options;
}

void report_memberships(cohort::ElasticTrainer& trainer,
                        std::function<void(const cohort::Membership&)> also) {
  trainer.on_membership_change([&trainer, also = std::move(also)](const cohort::Membership& m) {
    if (also) also(m);
    if (m.rank != 0) return;
    std::printf("membership: %s (in %.2f s)\n", m.describe().c_str(),
                trainer.last_change_seconds());
    std::fflush(stdout);
  });
}

double run_elastic_steps(cohort::ElasticTrainer& trainer, const ElasticRunSettings& settings,
                         const std::function<torch::Tensor(const cohort::ElasticStep&)>& loss_of,
                         const ElasticStepHooks& hooks) {
  const auto start = std::chrono::steady_clock::now();
  double last_loss = 0;
  while (static_cast<int64_t>(trainer.epoch()) < settings.epochs &&
         (settings.max_steps < 0 || trainer.committed_steps() < settings.max_steps)) {
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      const torch::Tensor loss = loss_of(step);
      loss.backward();
      if (hooks.after_backward) hooks.after_backward();
      last_loss = loss.item<double>();
    });
    if (!committed) continue;
    if (hooks.after_commit) hooks.after_commit();
    const int64_t done = trainer.committed_steps();
    if (trainer.membership().rank == 0 && done % settings.log_every == 0) {
      std::printf("step %lld loss %.4f on %d rank(s)\n", (long long)done, last_loss,
                  trainer.membership().size);
      std::fflush(stdout);
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace cohort_examples
