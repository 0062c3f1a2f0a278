// The model, data and loss of tests/elastic, shared by the member program (elastic_rank.cc) and
// the one-process replay that checks it (elastic_training_test.cc).
#pragma once

#include <torch/torch.h>

#include "cohort/torch/data/elastic_sampler.h"
#include "cohort/torch/optim/lr_schedule.h"

namespace cohort::testing {

struct ElasticData {
  torch::Tensor inputs;   // [N, 8]
  torch::Tensor targets;  // [N] classes 0..3
};

inline constexpr int64_t kElasticSamples = 203;  // not a multiple of 2, 3 or 4: tails happen

inline ElasticData elastic_data() {
  auto generator = torch::make_generator<torch::CPUGeneratorImpl>(2024);
  auto inputs = torch::randn({kElasticSamples, 8}, generator);
  auto targets = std::get<1>(inputs.narrow(1, 0, 4).max(1));
  return {inputs, targets};
}

// `hidden` other than 16: another model, which a running job refuses. `batch_norm`: a
// BatchNorm1d after the first layer (statistics of the batch the forward sees).
inline torch::nn::Sequential make_elastic_model(int64_t hidden = 16, bool batch_norm = false) {
  torch::manual_seed(7);
  torch::nn::Sequential model(torch::nn::Linear(8, hidden));
  if (batch_norm) model->push_back(torch::nn::BatchNorm1d(hidden));
  model->push_back(torch::nn::Tanh());
  model->push_back(torch::nn::Linear(hidden, 4));
  return model;
}

inline ElasticSamplerOptions elastic_sampler_options(size_t batch_per_rank, size_t global_batch) {
  ElasticSamplerOptions options;
  if (global_batch > 0) {
    options.global_batch = global_batch;
  } else {
    options.batch_per_rank = batch_per_rank;
  }
  options.seed = 11;
  return options;
}

// ElasticTrainerOptions::lr_schedule of a job of `steps` steps: a linear warm-up of
// `warmup_steps`, then a cosine decay to 0 at the last step.
inline optim::LrScheduleOptions elastic_lr_schedule(int64_t warmup_steps, int64_t steps) {
  optim::LrScheduleOptions schedule;
  schedule.warmup_steps = warmup_steps;
  schedule.decay = optim::LrDecay::kCosine;
  schedule.total_steps = steps;
  return schedule;
}

inline torch::Tensor elastic_loss(torch::nn::SequentialImpl& model, const ElasticData& data,
                                  const torch::Tensor& index) {
  return torch::nn::functional::cross_entropy(model.forward(data.inputs.index_select(0, index)),
                                              data.targets.index_select(0, index));
}

}  // namespace cohort::testing
