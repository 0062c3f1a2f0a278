#include "memory.h"

#include <sys/resource.h>

#include <stdexcept>

namespace char_lm {

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

int64_t adamw_state_bytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& entry : optimizer.state()) {
    const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(entry.second.get());
    if (adamw == nullptr) {
      throw std::invalid_argument("adamw_state_bytes: the optimizer's state is not AdamW's");
    }
    bytes += tensor_bytes({adamw->exp_avg(), adamw->exp_avg_sq(), adamw->max_exp_avg_sq()});
  }
  return bytes;
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

}  // namespace char_lm
