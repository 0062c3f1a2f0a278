#include "local_sgd_options.h"

#include <CLI/CLI.hpp>

namespace cohort_examples {

std::optional<cohort::LocalSgdOptions> LocalSgdSettings::options() const {
  if (period <= 0) return std::nullopt;
  cohort::LocalSgdOptions o;
  o.period = period;
  o.warmup_steps = warmup;
  return o;
}

void add_local_sgd_options(CLI::App& app, LocalSgdSettings& settings) {
  app.add_option("--local-sgd", settings.period,
                 "Local SGD: average the models every this many steps instead of the gradients "
                 "every step (0: off; ddp only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--local-sgd-warmup", settings.warmup,
                 "Post-local SGD: steps of ordinary DDP before local SGD starts")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace cohort_examples
