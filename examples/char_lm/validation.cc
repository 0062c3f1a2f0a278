#include "validation.h"

#include <algorithm>
#include <vector>

namespace char_lm {
namespace {

constexpr int64_t kEvalBatch = 64;

}  // namespace

double validation_loss(cohort::Group& group, const TextWindows& validation,
                       const SummedLoss& summed_loss) {
  torch::NoGradGuard no_grad;
  const int64_t share = static_cast<int64_t>(validation.size().value()) / group.size();
  const int64_t begin = share * group.rank();
  std::vector<double> sums = {0.0, 0.0};  // loss over every character, characters
  for (int64_t i = begin; i < begin + share; i += kEvalBatch) {
    const torch::data::Example<> batch =
        validation.range(i, std::min(begin + share, i + kEvalBatch));
    sums[0] += summed_loss(batch).item<double>();
    sums[1] += static_cast<double>(batch.target.numel());
  }
  group.allreduce(cohort::make_buffer(sums));
  return sums[0] / std::max(1.0, sums[1]);
}

}  // namespace char_lm
