// cohort-fsdp-observer-bench: what FullyShardedDataParallel's operator observer costs each
// operator on the thread it watches (docs/fsdp.md, "Limits of the interception";
// docs/bench.md, "FSDP"). One process, a group of one rank: no collective is timed.
//
//   build/bin/cohort-fsdp-observer-bench --benchmark_repetitions=5
//       (--benchmark_report_aggregates_only=true for the medians alone)
//
// Each benchmark runs one small torch::add (16 elements, so that the observer's share shows)
// in one of three states:
//  - NoFsdp: no FullyShardedDataParallel alive, libtorch alone;
//  - OtherTensors: an FSDP over a model of 8 units alive, the add on tensors outside it
//    (every operator of a training step pays this: the observer looks its inputs up);
//  - GatheredParameter: the add reads a parameter of a unit that is gathered (an operator of
//    the unit's forward: the lookup finds the unit, which needs nothing).
// The observer's cost per operator is the difference to NoFsdp.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <memory>

#include "cohort/comm/group.h"
#include "cohort/comm/inproc_transport.h"
#include "cohort/torch/shard/fsdp.h"

namespace {

torch::nn::Sequential eight_units() {
  torch::nn::Sequential net;
  for (int i = 0; i < 8; ++i) net->push_back(torch::nn::Linear(64, 64));
  return net;
}

// A model wrapped by FSDP on a group of one rank, for as long as the benchmark runs.
struct Wrapped {
  Wrapped()
      : group(cohort::Group::create_inproc(std::make_shared<cohort::InprocFabric>(1), 0)),
        net(eight_units()),
        fsdp(net, group) {}
  std::shared_ptr<cohort::Group> group;
  torch::nn::Sequential net;
  cohort::FullyShardedDataParallel fsdp;
};

void time_adds(benchmark::State& state, const torch::Tensor& a) {
  const auto b = torch::ones({16});
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    auto c = torch::add(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
}

void NoFsdp(benchmark::State& state) {
  time_adds(state, torch::ones({16}));
}

void OtherTensors(benchmark::State& state) {
  Wrapped wrapped;
  time_adds(state, torch::ones({16}));
}

void GatheredParameter(benchmark::State& state) {
  Wrapped wrapped;
  auto first = wrapped.net->parameters()[1];  // the first Linear's bias: 64 elements
  time_adds(state, first.narrow(0, 0, 16));
}

BENCHMARK(NoFsdp);
BENCHMARK(OtherTensors);
BENCHMARK(GatheredParameter);

}  // namespace

BENCHMARK_MAIN();
