// Training with a parameter server (--mode ps|ssp, docs/async.md): the last --servers ranks
// serve the model's parameters, the others train on their slices of each epoch and push their
// gradients; the test accuracy is taken once at the end, on the servers' final parameters.
#pragma once

#include <memory>

#include "cohort/comm/group.h"
#include "train_options.h"
#include "trainer.h"

namespace fashion_mnist {

// Collective over `group`. Throws cohort::InvalidArgument for options a parameter-server job
// does not take (naming them), DataError for missing data, cohort::Error for failures.
TrainResult train_with_parameter_server(const TrainOptions& options,
                                        std::shared_ptr<cohort::Group> group);

}  // namespace fashion_mnist
