// Data-parallel training of the character language model: the fortunes cut into windows and
// sharded over the ranks by a DistributedSampler, AdamW with warm-up and cosine decay, gradient
// clipping, the validation loss after each epoch against the unigram baseline, memory per rank,
// checkpoints, and the same progress and per-step figures as the Fashion-MNIST example
// (docs/char_lm.md).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/group.h"
#include "train_options.h"

namespace char_lm {

struct TrainResult {
  std::optional<double> validation_loss;  // nats per character, after the last epoch
  double unigram_entropy = 0;             // the baseline, nats per character
  double samples_per_s = 0;               // windows per second over every step run
  int64_t steps = 0;
  std::string sample;  // text the model wrote at the end (--sample)
};

// Collective over `group`. Throws DataError for missing or unusable text, cohort::Error for bad
// options (InvalidArgument) and failures of the job.
TrainResult train(const TrainOptions& options, std::shared_ptr<cohort::Group> group);

}  // namespace char_lm
