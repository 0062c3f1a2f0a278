#include "agreed_values.h"

#include <algorithm>
#include <cmath>

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {

void append_agreed(std::vector<double>& message, const std::vector<AgreedValue>& agreed, bool max) {
  for (const AgreedValue& a : agreed) {
    message.push_back(a.value);
    message.push_back(max ? -a.value : a.value * a.value);
  }
}

void check_agreed(const std::vector<double>& reduced, size_t at,
                  const std::vector<AgreedValue>& agreed, bool max, int world) {
  for (size_t i = 0; i < agreed.size(); ++i) {
    const double first = reduced[at + 2 * i], second = reduced[at + 2 * i + 1];
    if (max) {
      if (first == -second) continue;
      throw ConfigError(detail::concat("the ranks hold different ", agreed[i].name, ", from ",
                                       -second, " to ", first, ". Give every rank the same value"));
    }
    if (std::abs(world * second - first * first) <= 1e-9 * std::max(1.0, first * first)) continue;
    throw ConfigError(detail::concat("the ranks hold different ", agreed[i].name,
                                     ". Give every rank the same value"));
  }
}

}  // namespace cohort
