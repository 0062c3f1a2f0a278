#include "async/server_role.h"

#include <fstream>
#include <stdexcept>
#include <string>

#include "async/pair_groups.h"
#include "async/protocol.h"
#include "cohort/core/error.h"
#include "cohort/core/logging.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::ps {
namespace {

constexpr int kClient = 1;  // a pair's client is its rank 1 (pair_groups.h)

ConsistencyRule rule_of(const ParameterServerOptions& options) {
  ConsistencyRule rule;
  rule.mode = options.consistency;
  rule.staleness = options.consistency == Consistency::kSynchronous ? 0 : options.staleness;
  rule.backup_workers = options.backup_workers;
  rule.lr_scaling = options.staleness_lr_scaling;
  return rule;
}

}  // namespace

ServerRole::ServerRole(std::shared_ptr<Group> group, Layout layout, int server_index,
                       std::vector<torch::Tensor> shard,
                       std::unique_ptr<torch::optim::Optimizer> optimizer,
                       const ParameterServerOptions& options,
                       std::vector<std::shared_ptr<Group>> pairs)
    : RoleWithLayout(std::move(layout)),
      group_(std::move(group)),
      server_index_(server_index),
      timeout_(options.timeout),
      shard_(std::move(shard), std::move(optimizer), rule_of(options), layout_.clients,
             options.timeline),
      pairs_(std::move(pairs)) {
  if (!options.checkpoint.empty()) {
    const std::string path = options.checkpoint + ".server" + std::to_string(server_index);
    if (std::ifstream(path).good() && shard_.load(path, options.resume_any_job, options.start_afresh)) {
      COHORT_LOG(kInfo, "ParameterServer: server ", server_index, " resumed from ", path,
                 " at step ", shard_.stats().version);
    }
    shard_.save_to(path, options.checkpoint_every);
  }
  for (int c = 0; c < static_cast<int>(pairs_.size()); ++c) {
    sessions_.emplace_back([this, c] { session(c); });
  }
}

ServerRole::~ServerRole() {
  bool running = false;
  for (auto& s : sessions_) running = running || s.joinable();
  if (running) {
    for (auto& pair : pairs_) pair->abort("the parameter server on this rank was destroyed");
  }
  join_sessions();
}

void ServerRole::join_sessions() noexcept {
  for (auto& s : sessions_) {
    if (s.joinable()) s.join();
  }
}

// What the session of a client throws when the connection to it fails: the client is gone,
// the server goes on.
struct ClientLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename Exchange>
void with_client(Exchange&& exchange) {
  try {
    exchange();
  } catch (const std::exception& e) {
    throw ClientLost(e.what());
  }
}

void ServerRole::session(int client) noexcept {
  const int rank = layout_.clients[static_cast<size_t>(client)];
  try {
    try {
      serve_client(client);
    } catch (const ClientLost& e) {
      shard_.leave(client, true);  // may complete a step: may throw like any step
      COHORT_LOG(kWarn, "ParameterServer: worker rank ", rank, " is gone (",
                 with_group_ranks(e.what(), group_->rank(), rank), "); going on with ",
                 shard_.clients_alive(), " of ", layout_.clients.size(), " workers");
    } catch (const TimeoutError& e) {
      // The staleness bound kept this worker waiting past the deadline: it hears why (the
      // ranks that held the step up) and throws TimeoutError (kHeldUp, protocol.h).
      pairs_[static_cast<size_t>(client)]->abort(e.what());
      shard_.leave(client, true);
      COHORT_LOG(kWarn, "ParameterServer: dropped worker rank ", rank, ": ", e.what());
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

// The server itself failed (its optimizer threw, a checkpoint could not be written, a
// malformed message): no worker can go on.
void ServerRole::fail(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (!fatal_) fatal_ = error;
  }
  shard_.stop();  // the other sessions stop waiting
  for (auto& pair : pairs_) {
    pair->abort("parameter server rank " + std::to_string(group_->rank()) + " failed");
  }
}

void ServerRole::serve_client(int client) {
  Group& pair = *pairs_[static_cast<size_t>(client)];
  const auto options = torch::TensorOptions().dtype(shard_.dtype());
  torch::Tensor parameters = torch::empty({shard_.numel()}, options);
  for (;;) {
    Header header;
    with_client([&] { pair.recv(header_buffer(header), kClient, on_tag(kHeaderTag, timeout_)); });
    switch (header.kind) {
      case MessageKind::kPull:
        reply(pair, shard_.current_parameters(parameters), parameters);
        break;
      case MessageKind::kPush: {
        torch::Tensor gradient = torch::empty({shard_.numel()}, options);
        with_client([&] {
          pair.recv(tensor_buffer(gradient), kClient, on_tag(kPayloadTag, timeout_));
        });
        shard_.add_gradient(client, header.computed_on, header.clock, header.weight, gradient);
        reply(pair,
              shard_.parameters_for(client, parameters,
                                    Deadline::after(held_up_deadline(timeout_))),
              parameters);
        break;
      }
      case MessageKind::kDone:
        shard_.leave(client, false);
        reply(pair, shard_.final_parameters(parameters, timeout_), parameters);
        return;
      default:
        throw ProtocolError("ParameterServer: message of unknown kind " +
                            std::to_string(static_cast<int64_t>(header.kind)) + " from rank " +
                            std::to_string(layout_.clients[static_cast<size_t>(client)]));
    }
  }
}

void ServerRole::reply(Group& pair, int64_t version, const torch::Tensor& parameters) {
  Header header;
  header.kind = MessageKind::kParameters;
  header.version = version;
  with_client([&] {
    pair.send(header_buffer(header), kClient, on_tag(kHeaderTag, timeout_));
    pair.send(tensor_buffer(parameters), kClient, on_tag(kPayloadTag, timeout_));
  });
}

void ServerRole::serve() {
  join_sessions();
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    if (fatal_) std::rethrow_exception(fatal_);
  }
  const ServerStats stats = shard_.stats();
  if (!stats.dead_workers.empty() && stats.dead_workers.size() == layout_.clients.size()) {
    throw PeerError(stats.dead_workers.front(),
                    "ParameterServer: every worker died before finishing (the first: rank " +
                        std::to_string(stats.dead_workers.front()) + ")");
  }
}

[[noreturn]] void ServerRole::not_on_a_server(const char* call) const {
  throw InvalidArgument(std::string("ParameterServer::") + call + " is for workers; rank " +
                        std::to_string(group_->rank()) + " is a server: call serve()");
}

void ServerRole::push() { not_on_a_server("push()"); }
void ServerRole::wait_for_parameters() { not_on_a_server("wait_for_parameters()"); }
void ServerRole::finish() { not_on_a_server("finish()"); }
int64_t ServerRole::parameter_version() const { return shard_.stats().version; }

}  // namespace cohort::ps
