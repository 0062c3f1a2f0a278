// Test-set evaluation shared by the trainers: each rank of `group` evaluates its slice of the
// test set and the counts are summed over the group (collective).
#pragma once

#include <torch/torch.h>

#include <functional>

#include "cohort/comm/group.h"
#include "dataset.h"

namespace fashion_mnist {

struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};

// `forward` runs the model on a batch of images and returns float32 log-probabilities.
Evaluation evaluate_slices(const Images& test, cohort::Group& group,
                           const std::function<torch::Tensor(const torch::Tensor&)>& forward);
// The whole test set on this rank alone.
Evaluation evaluate_all(const Images& test,
                        const std::function<torch::Tensor(const torch::Tensor&)>& forward);

}  // namespace fashion_mnist
