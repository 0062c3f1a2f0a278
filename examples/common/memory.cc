#include "memory.h"

#include <sys/resource.h>

namespace cohort_examples {

int64_t tensor_bytes(const std::vector<torch::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const torch::Tensor& t : tensors) {
    if (t.defined()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  return bytes;
}

int64_t gradient_bytes(const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : parameters) grads.push_back(p.grad());
  return tensor_bytes(grads);
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace cohort_examples
