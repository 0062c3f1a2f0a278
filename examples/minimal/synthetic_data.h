// The minimal examples' data: points in 32 dimensions labeled by a fixed random linear teacher
// (4 classes), the same on every rank. Replace it by your torch::data dataset.
#pragma once

#include <torch/torch.h>

class SyntheticData : public torch::data::datasets::Dataset<SyntheticData> {
 public:
  explicit SyntheticData(int64_t samples = 8192) {
    torch::Generator generator = at::detail::createCPUGenerator(/*seed_in=*/1234);
    inputs_ = torch::randn({samples, 32}, generator);
    labels_ = inputs_.matmul(torch::randn({32, 4}, generator)).argmax(1);
  }
  torch::data::Example<> get(size_t index) override {
    const auto i = static_cast<int64_t>(index);
    return {inputs_[i], labels_[i]};
  }
  torch::optional<size_t> size() const override { return static_cast<size_t>(inputs_.size(0)); }

 private:
  torch::Tensor inputs_, labels_;
};

// A small classifier: two Linear layers, a Sequential (FSDP makes each child a unit).
inline torch::nn::Sequential make_classifier() {
  return torch::nn::Sequential(torch::nn::Linear(32, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 4));
}
