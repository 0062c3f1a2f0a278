#include "async/layout.h"

namespace cohort::ps {

torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const std::vector<int>& which) {
  std::vector<torch::Tensor> pieces;
  pieces.reserve(which.size());
  for (int i : which) pieces.push_back(tensors[static_cast<size_t>(i)].detach().reshape({-1}));
  return torch::cat(pieces);
}

void unflatten_into(const torch::Tensor& flat, std::vector<torch::Tensor>& tensors,
                    const std::vector<int>& which) {
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (int i : which) {
    torch::Tensor& t = tensors[static_cast<size_t>(i)];
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

int64_t numel_of(const std::vector<torch::Tensor>& tensors, const std::vector<int>& which) {
  int64_t n = 0;
  for (int i : which) n += tensors[static_cast<size_t>(i)].numel();
  return n;
}

}  // namespace cohort::ps
