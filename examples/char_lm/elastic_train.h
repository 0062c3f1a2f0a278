// --elastic: the character GPT trained by cohort::ElasticTrainer (docs/elastic.md), so that the
// job goes on when ranks die or join (under cohortrun --min-ranks N): DDP in float32, the global
// batch kept at --batch-size, the learning-rate schedule following the committed steps, the
// state kept in memory by the members instead of checkpoints, and every change of membership
// printed. The validation loss is taken once at the end, by rank 0.
#pragma once

#include "train_options.h"
#include "trainer.h"

namespace char_lm {

// Joins the elastic job (cohort::init_elastic). Throws cohort::InvalidArgument for options the
// elastic trainer does not take, DataError for missing text, cohort::ElasticError when the job
// cannot go on. `rank` is set to this member's rank at the end.
TrainResult train_elastic(const TrainOptions& options, int& rank, int& ranks);

}  // namespace char_lm
