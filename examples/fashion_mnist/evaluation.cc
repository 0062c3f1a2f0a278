#include "evaluation.h"

#include <algorithm>
#include <vector>

namespace fashion_mnist {

Evaluation evaluate_slices(const Images& test, cohort::Group& group,
                           const std::function<torch::Tensor(const torch::Tensor&)>& forward) {
  torch::NoGradGuard no_grad;
  const int64_t n = test.size(), w = group.size(), r = group.rank();
  const int64_t begin = n * r / w, end = n * (r + 1) / w;
  std::vector<double> sums = {0.0, 0.0};  // correct, loss
  for (int64_t i = begin; i < end; i += 1000) {
    const int64_t stop = std::min(end, i + 1000);
    const torch::Tensor out = forward(test.images.slice(0, i, stop));
    const torch::Tensor labels = test.labels.slice(0, i, stop);
    sums[0] += out.argmax(1).eq(labels).sum().item<double>();
    sums[1] += torch::nll_loss(out, labels, {}, at::Reduction::Sum).item<double>();
  }
  group.allreduce(cohort::make_buffer(sums));
  return {sums[0] / double(n), sums[1] / double(n)};
}

}  // namespace fashion_mnist
