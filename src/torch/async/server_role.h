// The server side of ParameterServer: one session thread per client, each answering its
// client's messages (Note [Parameter server protocol]) against the shared ServerShard.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "async/layout.h"
#include "async/server_shard.h"
#include "cohort/torch/async/parameter_server.h"

namespace cohort::ps {

class ServerRole final : public RoleWithLayout {
 public:
  // Starts the sessions at once: workers pull their first parameters inside create().
  ServerRole(std::shared_ptr<Group> group, Layout layout, int server_index,
             std::vector<torch::Tensor> shard, std::unique_ptr<torch::optim::Optimizer> optimizer,
             const ParameterServerOptions& options, std::vector<std::shared_ptr<Group>> pairs);
  ~ServerRole() override;

  int server_index() const override { return server_index_; }
  int worker_index() const override { return -1; }

  void serve() override;
  ServerStats stats() const override { return shard_.stats(); }

  void push() override;
  void wait_for_parameters() override;
  void finish() override;
  int64_t parameter_version() const override;

 private:
  void session(int client) noexcept;
  void serve_client(int client);
  void reply(Group& pair, int64_t version, const torch::Tensor& parameters);
  void join_sessions() noexcept;
  void fail(std::exception_ptr error) noexcept;
  [[noreturn]] void not_on_a_server(const char* call) const;

  std::shared_ptr<Group> group_;
  const int server_index_;
  const Milliseconds timeout_;
  ServerShard shard_;
  std::vector<std::shared_ptr<Group>> pairs_;
  std::vector<std::thread> sessions_;
  std::mutex error_mutex_;
  std::exception_ptr fatal_;  // an error of the server itself (not of a client's connection)
};

}  // namespace cohort::ps
