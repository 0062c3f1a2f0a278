#include "diloco_options.h"

#include <CLI/CLI.hpp>

#include "cohort/core/error.h"

namespace cohort_examples {

std::optional<cohort::DiLoCoOptions> DiLoCoSettings::options() const {
  if (hierarchical && !enabled()) {
    throw cohort::InvalidArgument("--diloco-hierarchical needs --diloco H (the inner steps)");
  }
  if (!enabled()) return std::nullopt;
  cohort::DiLoCoOptions o;
  o.inner_steps = inner_steps;
  o.fragments = fragments;
  o.wire_dtype = dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  o.overlap_steps = overlap;
  o.merge_local = overlap > 0 ? merge : 0.0;
  o.hierarchical = hierarchical;
  return o;
}

void add_diloco_options(CLI::App& app, DiLoCoSettings& settings) {
  app.add_option("--diloco", settings.inner_steps,
                 "DiLoCo: each rank steps alone, and every this many steps the ranks average "
                 "their change of the model, which an outer Nesterov SGD applies (0: off; ddp "
                 "only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--diloco-fragments", settings.fragments,
                 "Streaming DiLoCo: the model in this many fragments, synchronized at staggered "
                 "steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--diloco-dtype", settings.dtype,
                 "What the averaged change travels as: fp32 or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_option("--diloco-overlap", settings.overlap,
                 "Streaming DiLoCo: apply each round this many steps after it starts, its "
                 "allreduce running beside those steps (less than --diloco)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--diloco-merge", settings.merge,
                 "With --diloco-overlap: the local parameters' share when a round is applied")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_flag("--diloco-hierarchical", settings.hierarchical,
               "Hierarchical DiLoCo: DDP's gradient allreduce inside each node, DiLoCo only "
               "across nodes (one rank per node sends each round)");
}

}  // namespace cohort_examples
