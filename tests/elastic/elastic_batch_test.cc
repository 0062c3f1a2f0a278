// cohort::elastic_batch: a torch::data data set's samples of an elastic step, in order and
// stacked, for each kind of data set; and an ElasticTrainer fed through it, against the same
// steps with the samples indexed by hand.
#include "cohort/torch/data/elastic_batch.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "cohort/comm/elastic.h"
#include "cohort/comm/memory_store.h"
#include "cohort/core/error.h"
#include "cohort/torch/elastic/elastic_trainer.h"
#include "elastic_model.h"
#include "support/test_support.h"

namespace cohort {
namespace {

using torch::data::Example;
using torch::data::TensorExample;

// Sample i is data [i, i + 0.5, i + 0.25] and target 10 i: a row names its index.
torch::Tensor sample_data(size_t i) {
  const float x = static_cast<float>(i);
  return torch::tensor({x, x + 0.5f, x + 0.25f});
}
torch::Tensor sample_target(size_t i) {
  return torch::tensor(static_cast<int64_t>(10 * i));
}

// What a DataLoader with Stack<> would give for `indices`.
Example<> expected_batch(const std::vector<size_t>& indices) {
  std::vector<torch::Tensor> data, targets;
  for (size_t i : indices) {
    data.push_back(sample_data(i));
    targets.push_back(sample_target(i));
  }
  return {torch::stack(data), torch::stack(targets)};
}

void expect_batch(const Example<>& batch, const std::vector<size_t>& indices) {
  const Example<> expected = expected_batch(indices);
  EXPECT_TRUE(torch::equal(batch.data, expected.data)) << batch.data << "\nwanted\n"
                                                       << expected.data;
  EXPECT_TRUE(torch::equal(batch.target, expected.target)) << batch.target << "\nwanted\n"
                                                           << expected.target;
}

// A torch::data Dataset: get_batch() is a std::vector<Example<>> of get(i).
class Samples : public torch::data::datasets::Dataset<Samples> {
 public:
  explicit Samples(size_t size, int* gets = nullptr) : size_(size), gets_(gets) {}
  Example<> get(size_t index) override {
    if (gets_ != nullptr) ++*gets_;
    return {sample_data(index), sample_target(index)};
  }
  torch::optional<size_t> size() const override { return size_; }

 private:
  size_t size_;
  int* gets_;
};

// A BatchDataset that builds its batch itself, with one index_select, as the examples do.
class GatheredSamples : public torch::data::datasets::BatchDataset<GatheredSamples, Example<>> {
 public:
  explicit GatheredSamples(size_t size) : all_(expected_batch(every_index(size))) {}
  Example<> get_batch(c10::ArrayRef<size_t> indices) override {
    const auto rows = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
    return {all_.data.index_select(0, rows), all_.target.index_select(0, rows)};
  }
  torch::optional<size_t> size() const override { return all_.data.size(0); }

 private:
  static std::vector<size_t> every_index(size_t size) {
    std::vector<size_t> all(size);
    for (size_t i = 0; i < size; ++i) all[i] = i;
    return all;
  }
  Example<> all_;
};

// A Dataset of data without targets.
class Unlabelled : public torch::data::datasets::Dataset<Unlabelled, TensorExample> {
 public:
  TensorExample get(size_t index) override { return TensorExample(sample_data(index)); }
  torch::optional<size_t> size() const override { return 6; }
};

const std::vector<size_t> kIndices = {7, 0, 3, 3, 9};  // any order, repeats kept

TEST(ElasticBatch, ADatasetsExamplesAreStackedInTheIndicesOrder) {
  Samples dataset(10);
  const Example<> batch = elastic_batch(dataset, kIndices);
  EXPECT_EQ(batch.data.sizes(), torch::IntArrayRef({5, 3}));
  EXPECT_EQ(batch.target.sizes(), torch::IntArrayRef({5}));
  expect_batch(batch, kIndices);
}

TEST(ElasticBatch, ABatchDatasetsOwnBatchIsReturnedAsItIs) {
  GatheredSamples dataset(10);
  expect_batch(elastic_batch(dataset, kIndices), kIndices);
}

TEST(ElasticBatch, ADatasetMappedWithStackGivesTheSameBatch) {
  auto dataset = Samples(10).map(torch::data::transforms::Stack<>());
  expect_batch(elastic_batch(dataset, kIndices), kIndices);
}

TEST(ElasticBatch, ExamplesWithoutTargetsAreStackedToo) {
  Unlabelled dataset;
  const TensorExample batch = elastic_batch(dataset, std::vector<size_t>{5, 1});
  EXPECT_TRUE(torch::equal(batch.data, torch::stack({sample_data(5), sample_data(1)})));
}

TEST(ElasticBatch, AnElasticStepGivesItsIndices) {
  Samples dataset(10);
  ElasticStep step;
  step.indices = {4, 8, 1};
  expect_batch(elastic_batch(dataset, step), step.indices);
}

TEST(ElasticBatch, AnIndexOutsideTheDatasetIsRefusedBeforeTheDatasetIsAsked) {
  int gets = 0;
  Samples dataset(10, &gets);
  try {
    elastic_batch(dataset, std::vector<size_t>{2, 10});
    ADD_FAILURE() << "index 10 of a data set of 10 was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sample index 10 (position 1 of 2) is outside the data "
                                         "set of 10 samples"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(gets, 0);
  GatheredSamples gathered(4);
  EXPECT_THROW(elastic_batch(gathered, std::vector<size_t>{4}), InvalidArgument);
}

TEST(ElasticBatch, NoIndicesAreRefused) {
  Samples dataset(10);
  try {
    elastic_batch(dataset, std::vector<size_t>{});
    ADD_FAILURE() << "an empty batch was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no sample indices"), std::string::npos) << e.what();
  }
}

// tests/elastic's data (elastic_model.h) as a torch::data Dataset, one get() per sample.
class ElasticSamples : public torch::data::datasets::Dataset<ElasticSamples> {
 public:
  explicit ElasticSamples(testing::ElasticData data) : data_(std::move(data)) {}
  Example<> get(size_t i) override {
    const auto row = static_cast<int64_t>(i);
    return {data_.inputs[row], data_.targets[row]};
  }
  torch::optional<size_t> size() const override { return data_.inputs.size(0); }

 private:
  testing::ElasticData data_;
};

// Two members of an in-process elastic job (threads over one store) train through
// elastic_batch; one process then takes the same steps with the same indices, indexing the
// tensors by hand and averaging the two members' gradients as DDP does. Each member's batch is
// also compared with the hand-indexed one inside the step.
TEST(ElasticBatch, AnElasticTrainerFedThroughItEqualsIndexingByHand) {
  constexpr int kWorld = 2;
  constexpr int64_t kTrainSteps = 24;  // 24 * 2 * 5 = 240 samples: into the second epoch
  constexpr double kLr = 0.1;
  const testing::ElasticData data = testing::elastic_data();
  std::vector<torch::nn::Sequential> models;
  for (int r = 0; r < kWorld; ++r) models.push_back(testing::make_elastic_model());
  std::vector<std::vector<std::vector<size_t>>> taken(kWorld);  // [rank][step] -> indices
  auto store = std::make_shared<MemoryStore>();
  testing::run_ranks(kWorld, [&](int rank) {
    ElasticOptions elastic_options;
    elastic_options.initial_size = kWorld;
    elastic_options.launch_rank = rank;
    elastic_options.group = testing::quick_options();
    ElasticGroup elastic(store, elastic_options);
    ElasticSamples dataset(data);
    auto& model = models[static_cast<size_t>(rank)];
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(kLr));
    ElasticTrainerOptions options;
    options.sampler = testing::elastic_sampler_options(5, 0);
    ElasticTrainer trainer(elastic, model, sgd, *dataset.size(), options);
    while (trainer.committed_steps() < kTrainSteps) {
      trainer.step([&](const ElasticStep& step) {
        const auto batch = elastic_batch(dataset, step);
        const auto rows =
            torch::tensor(std::vector<int64_t>(step.indices.begin(), step.indices.end()));
        EXPECT_TRUE(torch::equal(batch.data, data.inputs.index_select(0, rows)));
        EXPECT_TRUE(torch::equal(batch.target, data.targets.index_select(0, rows)));
        torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target).backward();
        auto& mine = taken[static_cast<size_t>(step.rank)];
        mine.resize(static_cast<size_t>(step.step) + 1);
        mine[static_cast<size_t>(step.step)] = step.indices;
      });
    }
    trainer.finish();
  });
  ASSERT_EQ(taken[0].size(), static_cast<size_t>(kTrainSteps));
  ASSERT_EQ(taken[1].size(), static_cast<size_t>(kTrainSteps));

  auto replay = testing::make_elastic_model();
  const auto parameters = replay->parameters();
  for (int64_t s = 0; s < kTrainSteps; ++s) {
    std::vector<torch::Tensor> mean(parameters.size());
    for (int r = 0; r < kWorld; ++r) {
      const auto& indices = taken[static_cast<size_t>(r)][static_cast<size_t>(s)];
      ASSERT_FALSE(indices.empty()) << "rank " << r << " step " << s;
      const auto rows = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()));
      replay->zero_grad();
      testing::elastic_loss(*replay, data, rows).backward();
      for (size_t p = 0; p < parameters.size(); ++p) {
        const auto g = parameters[p].grad() / kWorld;
        mean[p] = r == 0 ? g : mean[p] + g;
      }
    }
    torch::NoGradGuard no_grad;
    for (size_t p = 0; p < parameters.size(); ++p) parameters[p].sub_(mean[p] * kLr);
  }
  // The order of the two members' gradient sums differs from DDP's by float32 rounding only.
  for (int r = 0; r < kWorld; ++r) {
    const auto trained = models[static_cast<size_t>(r)]->parameters();
    for (size_t p = 0; p < parameters.size(); ++p) {
      EXPECT_TRUE(torch::allclose(trained[p], parameters[p], 1e-5, 1e-6))
          << "rank " << r << " parameter " << p << ": "
          << (trained[p] - parameters[p]).abs().max().item<float>();
    }
  }
}

}  // namespace
}  // namespace cohort
