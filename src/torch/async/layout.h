// Who is who in a parameter-server job, and which server holds which parameter; the same on
// every rank.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/torch/async/parameter_server.h"

namespace cohort::ps {

struct Layout {
  std::vector<int> servers;  // group ranks: the last num_servers
  std::vector<int> workers;  // the others
  // The workers that talk to the servers: every worker, or with hybrid each node's lowest.
  std::vector<int> clients;
  // Over the trained parameters (model.parameters() with requires_grad, in that order).
  std::vector<int> server_of_parameter;
  std::vector<std::vector<int>> parameters_of_server;
};

// What both roles (server_role.h, worker_role.h) answer from the layout.
class RoleWithLayout : public ParameterServer {
 public:
  explicit RoleWithLayout(Layout layout) : layout_(std::move(layout)) {}
  std::vector<int> server_ranks() const override { return layout_.servers; }
  std::vector<int> worker_ranks() const override { return layout_.workers; }
  std::vector<int> client_ranks() const override { return layout_.clients; }
  const std::vector<int>& server_of_parameter() const override {
    return layout_.server_of_parameter;
  }

 protected:
  const Layout layout_;
};

// The elements of parameters `which` of `tensors`, flattened one after another.
torch::Tensor flatten(const std::vector<torch::Tensor>& tensors, const std::vector<int>& which);
// The inverse: copies `flat` into parameters `which` of `tensors` (without recording grad).
void unflatten_into(const torch::Tensor& flat, std::vector<torch::Tensor>& tensors,
                    const std::vector<int>& which);
int64_t numel_of(const std::vector<torch::Tensor>& tensors, const std::vector<int>& which);

}  // namespace cohort::ps
