// Fully sharded data parallelism (FSDP's FULL_SHARD, ZeRO-3): parameters, gradients and
// optimizer state split among the ranks, bfloat16 autocast over float32 shards, activation
// checkpointing, clipping by the whole model's gradient norm, and a sharded checkpoint that
// resumes at any number of ranks and under any sharded strategy.
//
//   cohortrun --nproc-per-node 2 build/bin/minimal_fsdp [STRATEGY] [PRECISION] [CHECKPOINT]
//
// STRATEGY: full_shard (default), shard_grad_op, hybrid_shard, zero1, zero2 or ddp; PRECISION:
// fp32, bf16 (default) or fp16 (CUDA only); CHECKPOINT: a directory (default
// minimal_fsdp.ckpt), resumed when it holds one, written after every epoch.
#include <cohort/comm/init.h>
#include <cohort/torch/data/distributed_sampler.h>
#include <cohort/torch/strategy/strategy.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "synthetic_data.h"

int main(int argc, char** argv) {
  const std::string strategy = argc > 1 ? argv[1] : "full_shard";
  const std::string checkpoint = argc > 3 ? argv[3] : "minimal_fsdp.ckpt";
  auto group = cohort::init();
  torch::manual_seed(0);
  auto model = make_classifier();
  cohort::StrategyOptions options;
  options.precision = cohort::precision_named(argc > 2 ? argv[2] : "bf16");
  cohort::CheckpointPolicy recomputed;  // kept as inputs only, recomputed in backward
  recomputed.paths = {"2"};             // the last Linear
  options.activation_checkpointing = recomputed;
  auto run = cohort::make_strategy(cohort::strategy_named(strategy).value(), model, group, options);
  // Over this rank's shards (FSDP and ZeRO) or the whole parameters (ddp).
  torch::optim::AdamW optimizer(run->optimizer_parameters().values(),
                                torch::optim::AdamWOptions(0.01));

  auto data = SyntheticData().map(torch::data::transforms::Stack<>());
  cohort::DistributedSampler sampler(*data.size(), *group);
  auto loader = torch::data::make_data_loader(data, sampler, /*batch_size=*/64);
  cohort::TrainingState state;  // what a checkpoint holds besides the strategy's own state
  state.module = model.ptr().get();
  state.optimizer = &optimizer;
  state.sampler = &sampler;
  cohort::LoadOptions load;
  load.any_job = true;  // resume whatever this path holds, whichever job wrote it
  if (run->load(checkpoint, state, load) && group->rank() == 0)
    std::printf("resumed from %s at epoch %lld\n", checkpoint.c_str(), (long long)state.epoch + 1);
  for (; state.epoch < 3; ++state.epoch) {
    if (sampler.epoch() != static_cast<uint64_t>(state.epoch)) sampler.set_epoch(state.epoch);
    double loss_sum = 0;
    int64_t steps = 0;
    for (auto& batch : *loader) {
      run->zero_grad(optimizer);
      torch::Tensor loss;
      {
        auto autocast = run->forward_scope();  // bfloat16 matmuls under bf16
        loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      }
      run->backward(loss);                  // scaled under fp16
      run->clip_gradients(optimizer, 1.0);  // the norm of the whole model's gradient
      run->step(optimizer);                 // skipped on every rank after an fp16 overflow
      loss_sum += loss.item<double>();
      ++steps;
      ++state.step;
    }
    sampler.set_epoch(state.epoch + 1);  // the checkpoint resumes at the next epoch's start
    cohort::TrainingState next = state;
    ++next.epoch;
    run->save(checkpoint, next);  // written in the background while training goes on
    if (group->rank() == 0)
      std::printf("epoch %lld: %s, mean loss %.4f\n", (long long)state.epoch + 1, strategy.c_str(),
                  loss_sum / static_cast<double>(steps));
  }
  run->finish_checkpoints();  // waits for the last save and throws its error
  return 0;
}
