#include "coalesced_broadcast.h"

#include <map>

#include "cohort/torch/tensor_buffer.h"

namespace cohort {

namespace {
// Tensors this large are broadcast where they are: one round trip is nothing next to copying
// them into a packed buffer and out of it.
constexpr size_t kInPlaceBytes = 1 << 20;
}  // namespace

void broadcast_coalesced(Group& group, const std::vector<torch::Tensor>& tensors, int root,
                         CallSite site) {
  if (group.size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  CollectiveOptions in_place;
  in_place.root = root;
  in_place.site = site;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& tensor : tensors) {
    if (tensor.is_contiguous() && tensor.nbytes() >= kInPlaceBytes) {
      in_place.stream = current_stream(tensor);
      group.broadcast(tensor_buffer(tensor), in_place);
    } else {
      by_type[tensor.scalar_type()].push_back(tensor);
    }
  }
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
