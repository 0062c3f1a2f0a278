#include "strategy.h"

#include <cstdio>

#include "cohort/core/error.h"
#include "memory.h"

namespace cohort_examples {

std::string strategy_help() {
  return "data parallelism: ddp (DistributedDataParallel), zero1 or zero2 (ZeroDataParallel "
         "stage 1 or 2), full_shard, shard_grad_op or hybrid_shard (FullyShardedDataParallel "
         "with that strategy), or auto (the planner's choice: docs/planner.md)";
}

std::vector<std::string> known_strategy_names() {
  std::vector<std::string> names;
  for (const cohort::StrategyKind kind : cohort::all_strategy_kinds())
    names.emplace_back(cohort::strategy_name(kind));
  return names;
}

std::vector<std::string> strategy_choices() {
  std::vector<std::string> choices = known_strategy_names();
  choices.emplace_back("auto");
  return choices;
}

cohort::StrategyKind strategy_kind(const std::string& name) {
  const auto kind = cohort::strategy_named(name);
  if (!kind) {
    throw cohort::InvalidArgument("--strategy " + name + " is unknown: give one of " +
                                  cohort::strategy_names());
  }
  return *kind;
}

void print_memory_of_ranks(const cohort::Strategy& strategy,
                           const torch::optim::Optimizer& optimizer, cohort::Group& group) {
  // The ranks' figures are gathered with one allreduce: each rank fills its own slots of a
  // zeroed vector.
  constexpr size_t kFigures = 7;
  const cohort::ModelStateBytes state = strategy.model_state_bytes(optimizer);
  std::vector<double> figures(kFigures * static_cast<size_t>(group.size()), 0.0);
  double* mine = figures.data() + kFigures * static_cast<size_t>(group.rank());
  mine[0] = double(state.parameters);
  mine[1] = double(state.peak_gathered);
  mine[2] = double(state.gradients);
  mine[3] = double(state.optimizer_state);
  mine[4] = double(peak_rss_bytes());
  mine[5] = double(state.peak_gradients);
  mine[6] = double(step_memory_peak_bytes());
  group.allreduce(cohort::make_buffer(figures));
  if (group.rank() != 0) return;
  const auto mib = [](double bytes) { return bytes / (1024.0 * 1024.0); };
  for (int r = 0; r < group.size(); ++r) {
    const double* f = figures.data() + kFigures * static_cast<size_t>(r);
    std::printf("  memory of rank %d: model state %.2f MiB (parameters %.2f", r,
                mib(f[0] + f[1] + f[2] + f[3]), mib(f[0]));
    if (f[1] > 0) std::printf(" + units gathered at once %.2f", mib(f[1]));
    std::printf(" + gradients %.2f", mib(f[2]));
    if (f[5] > f[2]) std::printf(" (peak %.2f in backward)", mib(f[5]));
    std::printf(" + optimizer state %.2f), ", mib(f[3]));
    if (f[6] > 0) std::printf("tensors of the steps %.1f MiB at peak, ", mib(f[6]));
    std::printf("peak RSS %.1f MiB\n", mib(f[4]));
  }
  std::fflush(stdout);
}

}  // namespace cohort_examples
