// Small pieces shared by the local SGD and DistributedOptimizer tests: one model made on the
// main thread and copied to every rank (so that rank threads never draw from torch's global
// RNG), the data of every step made there too, and comparisons of parameter lists.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace cohort::testing {

// 10 -> 16 -> ReLU -> 4.
inline torch::nn::Sequential small_mlp() {
  return torch::nn::Sequential(torch::nn::Linear(10, 16), torch::nn::ReLU(),
                               torch::nn::Linear(16, 4));
}

inline torch::nn::Sequential copy_of(const torch::nn::Sequential& model) {
  return torch::nn::Sequential(
      std::dynamic_pointer_cast<torch::nn::SequentialImpl>(model->clone()));
}

// Whole batches of world * per_rank samples, one per step; rank r trains on rows
// [r * per_rank, (r + 1) * per_rank).
struct StepData {
  std::vector<torch::Tensor> inputs, targets;
  torch::Tensor inputs_of(int step, int rank, int per_rank) const {
    return inputs[step].narrow(0, rank * per_rank, per_rank);
  }
  torch::Tensor targets_of(int step, int rank, int per_rank) const {
    return targets[step].narrow(0, rank * per_rank, per_rank);
  }
};
inline StepData make_step_data(int steps, int64_t samples, int seed = 1234) {
  torch::manual_seed(seed);  // main thread only
  StepData data;
  for (int s = 0; s < steps; ++s) {
    data.inputs.push_back(torch::randn({samples, 10}));
    data.targets.push_back(torch::randint(4, {samples}, torch::kLong));
  }
  return data;
}

inline torch::Tensor loss_of(torch::nn::Sequential& model, const torch::Tensor& x,
                             const torch::Tensor& y) {
  return torch::nn::functional::cross_entropy(model->forward(x), y);
}

inline torch::optim::SGDOptions sgd_momentum() {
  return torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3);
}

inline std::vector<torch::Tensor> snapshot(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copies;
  for (const auto& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

inline bool bitwise_equal(const std::vector<torch::Tensor>& a,
                          const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// "" when |got - want| <= atol + rtol * |want| everywhere, else what differs.
inline std::string compare(const std::vector<torch::Tensor>& got,
                           const std::vector<torch::Tensor>& want, double rtol, double atol) {
  if (got.size() != want.size()) return "different numbers of tensors";
  for (size_t i = 0; i < want.size(); ++i) {
    if (!torch::allclose(got[i], want[i], rtol, atol)) {
      return "tensor " + std::to_string(i) + " differs by up to " +
             std::to_string((got[i] - want[i]).abs().max().item<double>());
    }
  }
  return "";
}

// The element-wise mean over ranks of per-rank tensor lists.
inline std::vector<torch::Tensor> mean_over(const std::vector<std::vector<torch::Tensor>>& ranks) {
  std::vector<torch::Tensor> mean;
  for (size_t i = 0; i < ranks.front().size(); ++i) {
    std::vector<torch::Tensor> same;
    for (const auto& r : ranks) same.push_back(r[i]);
    mean.push_back(torch::stack(same).mean(0));
  }
  return mean;
}

}  // namespace cohort::testing
