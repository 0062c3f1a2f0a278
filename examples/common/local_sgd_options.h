// --local-sgd H and --local-sgd-warmup K of both examples (docs/compression.md, "Local SGD"):
// under --strategy ddp each rank steps on its own and the models are averaged every H steps,
// after K steps of ordinary DDP.
#pragma once

#include <cstdint>
#include <optional>

#include "cohort/torch/local_sgd/local_sgd.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cohort_examples {

struct LocalSgdSettings {
  int64_t period = 0;  // H; 0: off
  int64_t warmup = 0;  // K
  // The library's options (StrategyOptions::local_sgd); nullopt when off.
  std::optional<cohort::LocalSgdOptions> options() const;
};

void add_local_sgd_options(CLI::App& app, LocalSgdSettings& settings);

}  // namespace cohort_examples
