// cohort::ElasticSampler (include/cohort/torch/data/elastic_sampler.h).
#include "cohort/torch/data/elastic_sampler.h"

#include <algorithm>

#include "cohort/core/check.h"
#include "epoch_order.h"

namespace cohort {

ElasticSampler::ElasticSampler(size_t dataset_size, ElasticSamplerOptions options)
    : options_(options) {
  COHORT_CHECK((options.batch_per_rank > 0) != (options.global_batch > 0),
               "ElasticSampler: set exactly one of batch_per_rank (", options.batch_per_rank,
               ") and global_batch (", options.global_batch, ")");
  COHORT_CHECK(dataset_size > 0, "ElasticSampler: the data set is empty");
  order_.resize(dataset_size);
  begin_epoch(0);
}

void ElasticSampler::begin_epoch(uint64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  order_ = detail::epoch_order(order_.size(), options_.shuffle, options_.seed, epoch);
}

size_t ElasticSampler::step_samples(int world_size) const {
  COHORT_CHECK(world_size >= 1, "ElasticSampler: world size ", world_size, " is below 1");
  const size_t wanted = options_.batch_per_rank > 0
                            ? options_.batch_per_rank * static_cast<size_t>(world_size)
                            : options_.global_batch;
  return std::min(wanted, order_.size() - position_);
}

std::vector<size_t> ElasticSampler::step_indices(int rank, int world_size) const {
  COHORT_CHECK(rank >= 0 && rank < world_size, "ElasticSampler: rank ", rank,
               " is outside a world of ", world_size);
  const size_t count = step_samples(world_size);
  COHORT_CHECK(count >= static_cast<size_t>(world_size), "ElasticSampler: only ", count,
               " samples are left of epoch ", epoch_, " for ", world_size,
               " ranks; call skip_small_tail() before the step");
  std::vector<size_t> mine;
  for (size_t p = static_cast<size_t>(rank); p < count; p += static_cast<size_t>(world_size)) {
    mine.push_back(order_[position_ + p]);
  }
  return mine;
}

bool ElasticSampler::advance(int world_size) {
  position_ += step_samples(world_size);
  if (position_ < order_.size()) return false;
  begin_epoch(epoch_ + 1);
  return true;
}

bool ElasticSampler::skip_small_tail(int world_size) {
  COHORT_CHECK(order_.size() >= static_cast<size_t>(world_size), "ElasticSampler: the data set's ",
               order_.size(), " samples cannot give each of ", world_size, " ranks one");
  const size_t left = order_.size() - position_;
  if (left >= static_cast<size_t>(world_size)) return false;
  skipped_ += left;
  begin_epoch(epoch_ + 1);
  return true;
}

void ElasticSampler::restore(uint64_t epoch, size_t position, size_t skipped) {
  COHORT_CHECK(position <= order_.size(), "ElasticSampler::restore: position ", position,
               " is past the epoch's ", order_.size(), " samples");
  if (epoch != epoch_) begin_epoch(epoch);
  position_ = position;
  skipped_ = skipped;
}

}  // namespace cohort
