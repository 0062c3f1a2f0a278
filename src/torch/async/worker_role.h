// The worker side of ParameterServer. A client (every worker; with hybrid, each node's lowest
// worker) exchanges gradients and parameters with every server over its pairs (Note
// [Parameter server protocol]); with hybrid, the other workers of its node average their
// gradients with it and receive what it pulled.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "async/layout.h"
#include "async/protocol.h"
#include "cohort/torch/async/parameter_server.h"

namespace cohort::ps {

class WorkerRole final : public RoleWithLayout {
 public:
  // `node`: with hybrid, the group of this node's workers (its rank 0 is the client), else
  // null. `pairs`: one per server on a client, empty otherwise. Pulls the first parameters.
  WorkerRole(std::shared_ptr<Group> group, Layout layout, std::vector<torch::Tensor> parameters,
             const ParameterServerOptions& options, std::vector<std::shared_ptr<Group>> pairs,
             std::shared_ptr<Group> node);
  // A worker that leaves without finish() (its training threw) tells the servers at once.
  ~WorkerRole() override;

  int server_index() const override { return -1; }
  int worker_index() const override { return worker_index_; }

  void serve() override;
  ServerStats stats() const override;

  void push() override;
  void wait_for_parameters() override;
  void finish() override;
  int64_t parameter_version() const override;

 private:
  bool is_client() const { return !pairs_.empty(); }
  std::vector<torch::Tensor> gradients() const;
  void request(int server, MessageKind kind, Milliseconds reply_timeout);
  void receive_replies();
  void share_within_node();
  void check_usable(const char* call) const;
  void abandon(const std::string& reason) noexcept;
  // Gives up every exchange (the servers and the node hear of it) and throws `error` as this
  // worker's failure, naming the server.
  [[noreturn]] void server_failed(int server, const std::exception& error);

  std::shared_ptr<Group> group_;
  const int worker_index_;
  const Milliseconds timeout_;
  std::shared_ptr<Timeline> timeline_;
  std::vector<torch::Tensor> parameters_;  // the model's trained parameters
  std::vector<std::shared_ptr<Group>> pairs_;
  std::shared_ptr<Group> node_;

  int64_t clock_ = 0;                    // gradients pushed so far
  std::vector<int64_t> versions_;        // per server: of the parameters now in the model
  std::vector<torch::Tensor> outgoing_;  // per server: the gradient being sent
  std::vector<torch::Tensor> incoming_;  // per server: the parameters being received
  struct Exchange;
  std::vector<std::shared_ptr<Exchange>> exchanges_;  // per server: the request in flight
  bool awaiting_ = false;  // a push's parameters have not been waited for yet
  bool finished_ = false;  // finish() returned
  bool broken_ = false;    // an exchange failed: the pairs are given up
};

}  // namespace cohort::ps
