#include "coalesced_broadcast.h"

#include <map>

#include "cohort/torch/tensor_buffer.h"

namespace cohort {

void broadcast_coalesced(Group& group, const std::vector<torch::Tensor>& tensors, int root,
                         CallSite site) {
  if (group.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& tensor : tensors) by_type[tensor.scalar_type()].push_back(tensor);
  for (auto& [type, members] : by_type) {
    std::vector<torch::Tensor> flat_members;
    for (const auto& member : members) flat_members.push_back(member.reshape({-1}));
    auto flat = torch::cat(flat_members);
    CollectiveOptions options;
    options.root = root;
    options.site = site;
    options.stream = current_stream(flat);
    group.broadcast(tensor_buffer(flat), options);
    if (group.rank() == root) continue;
    int64_t offset = 0;
    for (auto& member : members) {
      member.copy_(flat.narrow(0, offset, member.numel()).view_as(member));
      offset += member.numel();
    }
  }
}

}  // namespace cohort
