// Fashion-MNIST (Zalando's 70,000 28x28 grey images of clothes in 10 classes), read from the
// four gzipped IDX files Debian's dataset-fashion-mnist package puts in
// /usr/share/datasets/fashion-mnist (or any directory holding them).
#pragma once

#include <torch/torch.h>

#include <string>

namespace fashion_mnist {

inline const char* const kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline const char* const kClassNames[10] = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                            "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                            "Bag",         "Ankle boot"};

enum class Split { kTrain, kTest };

// Images as float32 [N, 1, 28, 28], normalized with the training set's mean and standard
// deviation, and labels as int64 [N]. Throws DataError naming the file when one is missing or
// malformed (wrong sizes, labels outside 0-9, images and labels of different counts).
struct Images {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t size() const { return labels.size(0); }
};
Images load_split(const std::string& dir, Split split);

// A torch::data batch dataset over Images: a batch is gathered with one index_select, not
// one sample at a time.
class FashionMnist
    : public torch::data::datasets::BatchDataset<FashionMnist, torch::data::Example<>> {
 public:
  explicit FashionMnist(Images data) : data_(std::move(data)) {}
  torch::data::Example<> get_batch(c10::ArrayRef<size_t> indices) override;
  torch::optional<size_t> size() const override { return static_cast<size_t>(data_.size()); }
  const Images& data() const { return data_; }

 private:
  Images data_;
};

}  // namespace fashion_mnist
