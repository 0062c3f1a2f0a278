// A rank for the restart test (tests/launch/restart_test.cc): a small DDP training run that
// saves a checkpoint every few steps, resumes from it when there is one, and can kill itself
// at a chosen step on the first attempt (the test hook). At the end rank 0 writes the final
// parameters, raw, to --out, so two runs can be compared byte for byte.
//
//   ddp_restart_rank --checkpoint DIR/ck --out params.bin [--kill-rank R --kill-step S]
#include <signal.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cohort/comm/init.h"
#include "cohort/torch/checkpoint/checkpoint.h"
#include "cohort/torch/data/distributed_sampler.h"
#include "cohort/torch/ddp/ddp.h"

namespace {

constexpr int64_t kSamples = 96;
constexpr int64_t kBatchPerRank = 4;
constexpr int64_t kEpochs = 2;
constexpr int64_t kCheckpointEvery = 5;

struct Net : torch::nn::Module {
  Net() {
    hidden = register_module("hidden", torch::nn::Linear(10, 32));
    dropout = register_module("dropout", torch::nn::Dropout(0.2));  // uses the generator
    out = register_module("out", torch::nn::Linear(32, 3));
  }
  torch::Tensor forward(torch::Tensor x) {
    return out->forward(dropout->forward(torch::relu(hidden->forward(x))));
  }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
  torch::nn::Dropout dropout{nullptr};
};

// A fixed data set: the same on every rank and in every run.
struct Synthetic : torch::data::datasets::Dataset<Synthetic> {
  Synthetic() {
    torch::manual_seed(1234);
    inputs = torch::randn({kSamples, 10});
    targets = torch::argmax(inputs.slice(1, 0, 3), 1);
  }
  torch::data::Example<> get(size_t i) override { return {inputs[i], targets[i]}; }
  torch::optional<size_t> size() const override { return kSamples; }
  torch::Tensor inputs, targets;
};

void write_parameters(const std::string& path, torch::nn::Module& module) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& p : module.parameters()) {
    const torch::Tensor t = p.detach().contiguous();
    out.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("DDP training with checkpoints, for the restart test");
  std::string checkpoint, out;
  int kill_rank = -1;
  int64_t kill_step = -1;
  app.add_option("--checkpoint", checkpoint)->required();
  app.add_option("--out", out)->required();
  app.add_option("--kill-rank", kill_rank);
  app.add_option("--kill-step", kill_step);
  CLI11_PARSE(app, argc, argv);
  const char* restart = std::getenv("COHORT_RESTART_COUNT");
  const bool first_attempt = restart == nullptr || std::atoi(restart) == 0;

  auto group = cohort::init();
  Synthetic data;
  torch::manual_seed(group->rank());  // each rank its own weights (DDP copies rank 0's) and dropout
  auto net = std::make_shared<Net>();
  cohort::DistributedDataParallel ddp(net, group);
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  cohort::DistributedSamplerOptions sampler_options;
  sampler_options.seed = 7;
  cohort::DistributedSampler sampler(kSamples, *group, sampler_options);
  auto loader = torch::data::make_data_loader(data.map(torch::data::transforms::Stack<>()), sampler,
                                              kBatchPerRank);

  cohort::TrainingState state;
  state.module = net.get();
  state.optimizer = &optimizer;
  state.sampler = &sampler;
  if (cohort::load_checkpoint(checkpoint, *group, state)) {
    std::printf("resumed at step %lld epoch %lld\n", static_cast<long long>(state.step),
                static_cast<long long>(state.epoch));
    std::fflush(stdout);
  }
  for (; state.epoch < kEpochs; ++state.epoch) {
    if (sampler.epoch() != static_cast<uint64_t>(state.epoch)) sampler.set_epoch(state.epoch);
    for (auto& batch : *loader) {
      if (first_attempt && group->rank() == kill_rank && state.step == kill_step) ::raise(SIGKILL);
      optimizer.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(batch.data), batch.target).backward();
      optimizer.step();
      if (++state.step % kCheckpointEvery == 0) cohort::save_checkpoint(checkpoint, *group, state);
    }
  }
  if (group->rank() == 0) write_parameters(out, *net);
  std::printf("done at step %lld\n", static_cast<long long>(state.step));
  group->barrier();
  return 0;
}
