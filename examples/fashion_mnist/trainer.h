// Data-parallel training of a Fashion-MNIST classifier: DistributedDataParallel over the
// job's group, a DistributedSampler, SGD with momentum (or --optimizer), the library's linear
// scaling rule and learning-rate schedule (cohort/torch/optim/lr_schedule.h), evaluation on the
// test set after each epoch, a checkpoint after each epoch, and the figures that show where a
// step's time goes (docs/fashion_mnist.md).
#pragma once

#include <memory>
#include <optional>

#include "cohort/comm/group.h"
#include "train_options.h"

namespace fashion_mnist {

struct TrainResult {
  std::optional<double> test_accuracy;  // after the last epoch; none when not evaluated
  double samples_per_s = 0;             // over every step run
  int64_t steps = 0;
  // Whether this rank prints the job's final line (rank 0; under ps and ssp, every surviving
  // worker when a worker was lost), and which ranks its figures cover.
  bool reports = false;
  std::string covers;  // "4 rank(s)", "worker rank 2 alone"
};

// Collective over `group`. Throws DataError for missing or malformed data, cohort::Error for
// failures of the job.
TrainResult train(const TrainOptions& options, std::shared_ptr<cohort::Group> group);

}  // namespace fashion_mnist
