#include "compress/sparse_count.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cohort/core/error.h"
#include "cohort/torch/compress/sparsification.h"

namespace cohort {

int64_t sparse_count(double ratio, int64_t numel) {
  const double exact = ratio * static_cast<double>(numel);
  // ratio * n carries the rounding of ratio's binary form: 0.07 * 100 is 7.000000000000001,
  // whose ceiling would send one more than asked. Within a relative 1e-9 of an integer, that
  // integer is meant.
  double k = std::round(exact);
  if (std::abs(exact - k) > 1e-9 * std::max(1.0, exact)) k = std::ceil(exact);
  return std::min<int64_t>(numel, std::max<int64_t>(1, static_cast<int64_t>(k)));
}

void require_ratio(const std::string& hook, double ratio) {
  if (ratio > 0 && ratio <= 1) return;  // false for NaN too
  std::ostringstream message;
  message << hook << " hook: ratio " << ratio
          << " is outside (0, 1]; it is the share of each bucket's gradients sent (0.01: 1%; 1 "
             "sends them all)";
  throw InvalidArgument(message.str());
}

}  // namespace cohort
