// Elastic data-parallel training: a rank that dies costs the step it broke, not a restart. The
// survivors agree on who is left and go on at the new world size from the state they hold; a
// rank that cohortrun restarts joins at the next step and receives that state over the network.
//
//   cohortrun --nproc-per-node 3 --min-ranks 2 --max-restarts 2 build/bin/minimal_elastic
//
// Kill a rank while it runs (kill -9 on one of its pids) and watch the membership lines.
#include <cohort/comm/elastic.h>
#include <cohort/torch/data/elastic_batch.h>
#include <cohort/torch/elastic/elastic_trainer.h>
#include <torch/torch.h>

#include <cstdio>

#include "synthetic_data.h"

int main() {
  auto elastic = cohort::init_elastic();  // under cohortrun --min-ranks N
  torch::manual_seed(0);
  auto model = make_classifier();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  SyntheticData data;
  cohort::ElasticTrainerOptions options;
  options.sampler.global_batch = 128;  // kept when members leave: each takes a larger share
  cohort::ElasticTrainer trainer(*elastic, model, optimizer, *data.size(), options);
  trainer.on_membership_change([](const cohort::Membership& m) {
    if (m.rank == 0) std::printf("%s\n", m.describe().c_str());
  });
  double loss = 0, loss_sum = 0;  // this rank's slices'
  int64_t steps = 0;
  while (trainer.epoch() < 3) {
    const uint64_t epoch = trainer.epoch();
    const bool committed = trainer.step([&](const cohort::ElasticStep& step) {
      auto batch = cohort::elastic_batch(data, step);  // this rank's samples of the step
      auto l = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      l.backward();  // DDP averages the gradients over the members
      loss = l.item<double>();
    });
    if (!committed) continue;  // rolled back after a loss: the same samples are redone
    loss_sum += loss;
    ++steps;
    if (trainer.epoch() == epoch) continue;  // the epoch goes on
    if (trainer.membership().rank == 0) {
      std::printf("epoch %llu: %lld steps, %d ranks at its end, mean loss %.4f\n",
                  (unsigned long long)epoch + 1, (long long)steps, trainer.membership().size,
                  loss_sum / static_cast<double>(steps));
    }
    loss_sum = 0;
    steps = 0;
  }
  trainer.finish(cohort::ElasticFinish{});  // survivors of a loss during it finish it
  if (trainer.membership().rank == 0)
    std::printf("trained %lld steps\n", (long long)trainer.committed_steps());
  return 0;
}
