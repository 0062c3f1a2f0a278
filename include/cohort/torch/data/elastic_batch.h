// cohort::elastic_batch: this rank's batch of an elastic step, taken from a torch::data data set,
// so that an ElasticTrainer's step callback (cohort/torch/elastic/elastic_trainer.h) needs no
// index plumbing (docs/elastic.md, "Feeding a torch::data dataset"):
//
//   MyDataset dataset(...);                      // a torch::data Dataset, BatchDataset or map()
//   cohort::ElasticTrainer trainer(*elastic, model, optimizer, *dataset.size(), options);
//   trainer.step([&](const cohort::ElasticStep& step) {
//     auto batch = cohort::elastic_batch(dataset, step);   // step.indices, in order, stacked
//     loss_fn(model->forward(batch.data), batch.target).backward();
//   });
//
// It asks the data set for exactly step.indices, in their order, with one get_batch() call
// (a BatchDataset that gathers a batch at once, with one index_select, keeps doing so), and
// stacks what comes back as torch::data::transforms::Stack<> does in a DataLoader:
// - a data set whose batches are std::vector<Example<>> (a torch::data::datasets::Dataset, which
//   calls get(i) for each index, or one mapped with per-example transforms) gives one Example<>
//   of stacked data [n, ...] and stacked targets [n, ...]; std::vector<TensorExample> gives one
//   TensorExample;
// - any other batch (an Example<> a BatchDataset builds itself, a data set mapped with Stack<>,
//   a type of the user's) is returned as get_batch() gives it.
// Indices outside the data set (an ElasticTrainer given another dataset_size than the data set's
// size()) and an empty index list throw InvalidArgument before the data set is asked.
//
// Any list of sample indices works too: elastic_batch(dataset, sampler.step_indices(r, w)).
#pragma once

#include <c10/util/ArrayRef.h>
#include <torch/data/example.h>
#include <torch/data/transforms/stack.h>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace cohort {

struct ElasticStep;  // cohort/torch/elastic/elastic_trainer.h, which includes this folder

namespace detail {

// Throws InvalidArgument when `indices` is empty or holds an index >= dataset_size
// (kUnknownDatasetSize: a data set without a size(), whose indices are not checked).
inline constexpr size_t kUnknownDatasetSize = static_cast<size_t>(-1);
void check_batch_indices(c10::ArrayRef<size_t> indices, size_t dataset_size);

template <typename Batch>
struct StackedBatch {  // a batch returned as it is
  static Batch stack(Batch batch) { return batch; }
};
template <typename Item>
struct StackedBatch<std::vector<Item>> {
  // The examples Stack<> knows; a vector of anything else is returned as it is.
  static constexpr bool kStacks = std::is_same_v<Item, torch::data::Example<>> ||
                                  std::is_same_v<Item, torch::data::TensorExample>;
  static auto stack(std::vector<Item> examples) {
    if constexpr (kStacks) {
      return torch::data::transforms::Stack<Item>().apply_batch(std::move(examples));
    } else {
      return examples;
    }
  }
};

template <typename Dataset, typename = void>
struct TakesIndices : std::false_type {};
template <typename Dataset>
struct TakesIndices<Dataset, std::void_t<decltype(std::declval<Dataset&>().get_batch(
                                 std::declval<c10::ArrayRef<size_t>>()))>> : std::true_type {};

template <typename Dataset>
size_t dataset_size_of(const Dataset& dataset) {
  const auto size = dataset.size();  // torch::optional<size_t>
  return size.has_value() ? *size : kUnknownDatasetSize;
}

}  // namespace detail

// The samples `indices` of `dataset`, in that order, as one batch (stacked as above).
template <typename Dataset>
auto elastic_batch(Dataset& dataset, c10::ArrayRef<size_t> indices) {
  static_assert(detail::TakesIndices<Dataset>::value,
                "cohort::elastic_batch needs a data set whose get_batch() takes sample indices "
                "(c10::ArrayRef<size_t>): a torch::data Dataset, BatchDataset or MapDataset; a "
                "StreamDataset or StatefulDataset is read in order, not by index");
  detail::check_batch_indices(indices, detail::dataset_size_of(dataset));
  using Batch = std::decay_t<decltype(dataset.get_batch(indices))>;
  return detail::StackedBatch<Batch>::stack(dataset.get_batch(indices));
}

// This rank's batch of an ElasticTrainer step: elastic_batch(dataset, step.indices). (A template
// over the step so that this header needs ElasticStep declared only: the caller, who has a step,
// has its definition.)
template <typename Dataset, typename Step,
          typename = std::enable_if_t<std::is_same_v<Step, ElasticStep>>>
auto elastic_batch(Dataset& dataset, const Step& step) {
  return elastic_batch(dataset, c10::ArrayRef<size_t>(step.indices));
}

}  // namespace cohort
