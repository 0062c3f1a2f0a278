#include "dataset.h"

#include <vector>

#include "idx_file.h"

namespace fashion_mnist {

namespace {

// Of the 60,000 training images, scaled to [0, 1] (the usual Fashion-MNIST normalization).
constexpr double kMean = 0.2860;
constexpr double kStd = 0.3530;
constexpr int64_t kSide = 28;

std::string file_of(const std::string& dir, Split split, const char* kind) {
  return dir + "/" + (split == Split::kTrain ? "train" : "t10k") + "-" + kind + ".gz";
}

void check(bool ok, const std::string& path, const std::string& what) {
  if (!ok) throw DataError("data set file '" + path + "' " + what);
}

// (x / 255 - mean) / std as float32, in place in one buffer. Written as one expression,
// ((x.to(kFloat32) / 255.0 - kMean) / kStd), it held four float copies of the whole set at once
// (a temporary lives to the end of its full expression): 752 MB for the training set, the
// example's peak RSS (docs/fashion_mnist.md, "Memory"). The in-place operators run the same
// kernels on the same values, so the images are bit for bit those of the expression.
torch::Tensor normalized(torch::Tensor raw) {
  torch::Tensor images = raw.to(torch::kFloat32);
  raw = torch::Tensor();  // its 47 MB go before the arithmetic
  images.div_(255.0).sub_(kMean).div_(kStd);
  return images;
}

}  // namespace

Images load_split(const std::string& dir, Split split) {
  const std::string images_path = file_of(dir, split, "images-idx3-ubyte");
  const std::string labels_path = file_of(dir, split, "labels-idx1-ubyte");
  torch::Tensor raw_images = read_idx_u8(images_path, 3);
  const torch::Tensor raw_labels = read_idx_u8(labels_path, 1);
  check(raw_images.size(1) == kSide && raw_images.size(2) == kSide, images_path,
        "holds images of " + std::to_string(raw_images.size(1)) + "x" +
            std::to_string(raw_images.size(2)) + " pixels, expected 28x28");
  check(raw_images.size(0) == raw_labels.size(0), labels_path,
        "has " + std::to_string(raw_labels.size(0)) + " labels for " +
            std::to_string(raw_images.size(0)) + " images in " + images_path);
  check(raw_labels.numel() == 0 || raw_labels.max().item<int64_t>() < 10, labels_path,
        "holds labels above 9: it is not Fashion-MNIST");
  Images out;
  out.images = normalized(std::move(raw_images)).unsqueeze(1);
  out.labels = raw_labels.to(torch::kInt64);
  return out;
}

torch::data::Example<> FashionMnist::get_batch(c10::ArrayRef<size_t> indices) {
  std::vector<int64_t> rows(indices.begin(), indices.end());
  const torch::Tensor index = torch::tensor(rows, torch::kInt64);
  return {data_.images.index_select(0, index), data_.labels.index_select(0, index)};
}

}  // namespace fashion_mnist
