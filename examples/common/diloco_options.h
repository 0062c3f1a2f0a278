// --diloco H, --diloco-fragments F, --diloco-dtype, --diloco-overlap, --diloco-merge and
// --diloco-hierarchical of both examples (docs/compression.md, "DiLoCo"): DiLoCo or Streaming
// DiLoCo under --strategy ddp instead of a gradient allreduce (hierarchical: across nodes only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cohort/torch/local_sgd/diloco.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cohort_examples {

struct DiLoCoSettings {
  int64_t inner_steps = 0;  // H; 0: off
  int64_t fragments = 1;    // F
  std::string dtype = "fp32";
  int64_t overlap = 0;        // tau: rounds applied this many steps after they start
  double merge = 0.5;         // with overlap: the local parameters' share when a round is applied
  bool hierarchical = false;  // DDP inside a node, DiLoCo across nodes
  bool enabled() const { return inner_steps > 0; }
  // The library's options (StrategyOptions::diloco; DiLoCo's default outer optimizer: Nesterov
  // SGD, lr 0.7, momentum 0.9); nullopt when off. Throws cohort::InvalidArgument for
  // --diloco-hierarchical without --diloco.
  std::optional<cohort::DiLoCoOptions> options() const;
};

void add_diloco_options(CLI::App& app, DiLoCoSettings& settings);

}  // namespace cohort_examples
