#include "ddp/bucket_plan.h"

#include <algorithm>
#include <map>

namespace cohort {
namespace {

struct OpenBucket {
  std::vector<size_t> parameters;
  size_t bytes = 0;
  bool first = true;  // still the first bucket of its kind: closes at the first cap
};

}  // namespace

std::vector<std::vector<size_t>> plan_buckets(const BucketPlanInput& input) {
  std::map<int, OpenBucket> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t parameter : input.order) {
    OpenBucket& bucket = open[input.kind[parameter]];
    bucket.parameters.push_back(parameter);
    bucket.bytes += input.bytes[parameter];
    const size_t cap = bucket.first ? input.first_cap_bytes : input.cap_bytes;
    if (bucket.bytes >= cap) {
      closed.push_back(std::move(bucket.parameters));
      bucket = OpenBucket{{}, 0, false};
    }
  }
  for (auto& [kind, bucket] : open) {
    if (!bucket.parameters.empty()) closed.push_back(std::move(bucket.parameters));
  }
  std::vector<size_t> position(input.bytes.size(), 0);
  for (size_t i = 0; i < input.order.size(); ++i) position[input.order[i]] = i;
  std::stable_sort(closed.begin(), closed.end(), [&](const auto& a, const auto& b) {
    return position[a.front()] < position[b.front()];
  });
  return closed;
}

}  // namespace cohort
