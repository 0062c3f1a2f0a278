#include "evaluation.h"

#include <algorithm>
#include <vector>

namespace fashion_mnist {

namespace {

using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

// Test images per forward. CPU convolution unfolds its whole input at once (im2col): at 1000
// images the CNN's second convolution alone took 663 MB, and evaluation lifted the example's
// peak RSS from 440 to 1049 MiB (docs/fashion_mnist.md, "Memory"). At 100 it takes 66 MB,
// about what a training step's 64 images take.
constexpr int64_t kImagesPerForward = 100;

// Correct predictions and summed loss over test samples [begin, end).
std::vector<double> sums_over(const Images& test, int64_t begin, int64_t end,
                              const Forward& forward) {
  torch::NoGradGuard no_grad;
  std::vector<double> sums = {0.0, 0.0};  // correct, loss
  for (int64_t i = begin; i < end; i += kImagesPerForward) {
    const int64_t stop = std::min(end, i + kImagesPerForward);
    const torch::Tensor out = forward(test.images.slice(0, i, stop));
    const torch::Tensor labels = test.labels.slice(0, i, stop);
    sums[0] += out.argmax(1).eq(labels).sum().item<double>();
    sums[1] += torch::nll_loss(out, labels, {}, at::Reduction::Sum).item<double>();
  }
  return sums;
}

}  // namespace

Evaluation evaluate_slices(const Images& test, cohort::Group& group, const Forward& forward) {
  const int64_t n = test.size(), w = group.size(), r = group.rank();
  std::vector<double> sums = sums_over(test, n * r / w, n * (r + 1) / w, forward);
  group.allreduce(cohort::make_buffer(sums));
  return {sums[0] / double(n), sums[1] / double(n)};
}

Evaluation evaluate_all(const Images& test, const Forward& forward) {
  const std::vector<double> sums = sums_over(test, 0, test.size(), forward);
  return {sums[0] / double(test.size()), sums[1] / double(test.size())};
}

}  // namespace fashion_mnist
