// Data-parallel training with DistributedDataParallel in a few lines: every rank holds the
// model, trains on its shard of each epoch, and backward averages the gradients.
//
//   cohortrun --nproc-per-node 2 build/bin/minimal_ddp
//
// Another strategy, a precision or a checkpoint is one option away: minimal/fsdp.cc.
#include <cohort/comm/init.h>
#include <cohort/torch/data/distributed_sampler.h>
#include <cohort/torch/strategy/strategy.h>
#include <torch/torch.h>

#include <cstdio>

#include "synthetic_data.h"

int main() {
  auto group = cohort::init();  // this rank and the world, from cohortrun's environment
  torch::manual_seed(0);        // the same initial weights on every rank
  auto model = make_classifier();
  auto run = cohort::make_strategy(cohort::StrategyKind::kDdp, model, group);
  torch::optim::SGD optimizer(run->optimizer_parameters().values(),
                              torch::optim::SGDOptions(0.1).momentum(0.9));

  auto data = SyntheticData().map(torch::data::transforms::Stack<>());
  cohort::DistributedSampler sampler(*data.size(), *group);  // a disjoint shard per rank
  auto loader = torch::data::make_data_loader(data, sampler, /*batch_size=*/64);
  for (int epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    double loss_sum = 0;
    int64_t steps = 0;
    for (auto& batch : *loader) {
      run->zero_grad(optimizer);
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      run->backward(loss);  // DDP averages the gradients over the ranks as backward runs
      run->step(optimizer);
      loss_sum += loss.item<double>();
      ++steps;
    }
    if (group->rank() == 0) {
      std::printf("epoch %d: %lld steps on each of %d ranks, mean loss %.4f\n", epoch + 1,
                  static_cast<long long>(steps), group->size(), loss_sum / steps);
    }
  }
  return 0;
}
