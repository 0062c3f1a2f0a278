// --elastic: the same classifier trained by cohort::ElasticTrainer (docs/elastic.md), so that
// the job goes on when ranks die or join (under cohortrun --min-ranks N): DDP, the global batch
// kept at --batch-size (each rank's share grows when members leave, so the learning rate stays),
// the state kept in memory by the members instead of checkpoints, and every change of
// membership printed. Evaluated once at the end, on the whole test set, by rank 0.
#pragma once

#include "train_options.h"
#include "trainer.h"

namespace fashion_mnist {

// Joins the elastic job (cohort::init_elastic). Throws cohort::InvalidArgument for options the
// elastic trainer does not take (naming them), DataError for missing data, cohort::ElasticError
// when the job cannot go on.
TrainResult train_elastic(const TrainOptions& options);

}  // namespace fashion_mnist
