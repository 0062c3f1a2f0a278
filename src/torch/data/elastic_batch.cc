// The checks of cohort::elastic_batch (include/cohort/torch/data/elastic_batch.h), out of the
// template.
#include "cohort/torch/data/elastic_batch.h"

#include "cohort/core/check.h"

namespace cohort::detail {

void check_batch_indices(c10::ArrayRef<size_t> indices, size_t dataset_size) {
  // An ElasticStep's indices are never empty (ElasticSampler skips a tail smaller than the
  // world); an empty list here is a caller's own, and stacking nothing would fail in torch
  // with a message that names neither.
  COHORT_CHECK(!indices.empty(), "elastic_batch: no sample indices (an empty batch)");
  if (dataset_size == kUnknownDatasetSize) return;
  for (size_t i = 0; i < indices.size(); ++i) {
    // Most data sets would read past their end (an index_select fails, a get() reads anything):
    // the usual cause is an ElasticTrainer made with another dataset_size than this data set's.
    COHORT_CHECK(indices[i] < dataset_size, "elastic_batch: sample index ", indices[i],
                 " (position ", i, " of ", indices.size(), ") is outside the data set of ",
                 dataset_size,
                 " samples; was the ElasticTrainer or ElasticSampler given this "
                 "data set's size()?");
  }
}

}  // namespace cohort::detail
