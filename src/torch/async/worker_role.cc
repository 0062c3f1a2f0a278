#include "async/worker_role.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "async/pair_groups.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "cohort/torch/tensor_buffer.h"

namespace cohort::ps {
namespace {

constexpr int kServer = 0;  // a pair's server is its rank 0 (pair_groups.h)

// finish() waits for the other workers to end their training, which may be long; the server
// answers by then or fails (Note [Parameter server protocol]), and a dead server is noticed
// at once.
constexpr Milliseconds kFinishDeadline{24LL * 3600 * 1000};

std::vector<int> all_of(size_t n) {
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  return all;
}

}  // namespace

// One request to one server and its reply, in flight.
struct WorkerRole::Exchange {
  Header request;
  Header reply;
  std::vector<std::shared_ptr<Work>> sends;
  std::shared_ptr<Work> reply_header, reply_payload;
};

WorkerRole::WorkerRole(std::shared_ptr<Group> group, Layout layout,
                       std::vector<torch::Tensor> parameters,
                       const ParameterServerOptions& options,
                       std::vector<std::shared_ptr<Group>> pairs, std::shared_ptr<Group> node)
    : RoleWithLayout(std::move(layout)),
      group_(std::move(group)),
      worker_index_(static_cast<int>(
          std::find(layout_.workers.begin(), layout_.workers.end(), group_->rank()) -
          layout_.workers.begin())),
      timeout_(options.timeout),
      timeline_(options.timeline),
      parameters_(std::move(parameters)),
      pairs_(std::move(pairs)),
      node_(std::move(node)),
      versions_(layout_.servers.size(), 0),
      outgoing_(layout_.servers.size()),
      incoming_(layout_.servers.size()),
      exchanges_(layout_.servers.size()) {
  for (size_t s = 0; s < layout_.servers.size(); ++s) {
    const int64_t numel = numel_of(parameters_, layout_.parameters_of_server[s]);
    incoming_[s] = torch::empty({numel}, parameters_.front().options());
  }
  try {
    if (is_client()) {
      for (int s = 0; s < static_cast<int>(pairs_.size()); ++s) {
        request(s, MessageKind::kPull, reply_deadline(timeout_));
      }
      receive_replies();
    }
    if (node_) share_within_node();
  } catch (...) {
    abandon("worker rank " + std::to_string(group_->rank()) + " failed to start");
    throw;
  }
}

WorkerRole::~WorkerRole() {
  if (!finished_) {
    abandon("worker rank " + std::to_string(group_->rank()) + " left without finish()");
  }
  // The groups first: their queued operations use the buffers below until they end.
  pairs_.clear();
  node_.reset();
}

// The servers must learn at once that this worker is gone: a pair that is only closed
// says goodbye, and the server would wait for its next message until the deadline.
void WorkerRole::abandon(const std::string& reason) noexcept {
  for (auto& pair : pairs_) pair->abort(reason);
  if (node_) node_->abort(reason);
}

std::vector<torch::Tensor> WorkerRole::gradients() const {
  std::vector<torch::Tensor> grads;
  grads.reserve(parameters_.size());
  for (const auto& p : parameters_) {
    grads.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  }
  return grads;
}

void WorkerRole::request(int server, MessageKind kind, Milliseconds reply_timeout) {
  auto exchange = std::make_shared<Exchange>();
  exchange->request.kind = kind;
  exchange->request.computed_on = versions_[static_cast<size_t>(server)];
  exchange->request.clock = clock_;
  exchange->request.weight = node_ ? node_->size() : 1;
  Group& pair = *pairs_[static_cast<size_t>(server)];
  try {
    exchange->sends.push_back(
        pair.send_async(header_buffer(exchange->request), kServer, on_tag(kHeaderTag, timeout_)));
    if (kind == MessageKind::kPush) {
      exchange->sends.push_back(pair.send_async(tensor_buffer(outgoing_[server]), kServer,
                                                on_tag(kPayloadTag, timeout_)));
    }
    exchange->reply_header = pair.recv_async(header_buffer(exchange->reply), kServer,
                                             on_tag(kHeaderTag, reply_timeout));
    exchange->reply_payload = pair.recv_async(tensor_buffer(incoming_[server]), kServer,
                                              on_tag(kPayloadTag, reply_timeout));
  } catch (const std::exception& e) {
    server_failed(server, e);
  }
  exchanges_[static_cast<size_t>(server)] = std::move(exchange);
}

void WorkerRole::receive_replies() {
  for (int s = 0; s < static_cast<int>(pairs_.size()); ++s) {
    Exchange& exchange = *exchanges_[static_cast<size_t>(s)];
    try {
      for (auto& send : exchange.sends) send->wait();
      exchange.reply_header->wait();
      exchange.reply_payload->wait();
    } catch (const std::exception& e) {
      server_failed(s, e);
    }
    if (exchange.reply.kind != MessageKind::kParameters) {
      throw ProtocolError("ParameterServer: server rank " + std::to_string(layout_.servers[s]) +
                          " answered with a message of kind " +
                          std::to_string(static_cast<int64_t>(exchange.reply.kind)));
    }
    versions_[static_cast<size_t>(s)] = exchange.reply.version;
    unflatten_into(incoming_[static_cast<size_t>(s)], parameters_,
                   layout_.parameters_of_server[static_cast<size_t>(s)]);
  }
}

// Hybrid: the node's client (its rank 0) hands what it pulled to the node's other workers.
void WorkerRole::share_within_node() {
  const auto all = all_of(parameters_.size());
  torch::Tensor versions = torch::tensor(versions_, torch::kInt64);
  torch::Tensor flat = flatten(parameters_, all);
  node_->broadcast(tensor_buffer(versions));
  node_->broadcast(tensor_buffer(flat));
  if (is_client()) return;
  unflatten_into(flat, parameters_, all);
  for (size_t s = 0; s < versions_.size(); ++s) versions_[s] = versions[static_cast<int64_t>(s)].item<int64_t>();
}

void WorkerRole::check_usable(const char* call) const {
  if (broken_) {
    throw InvalidArgument(std::string("ParameterServer::") + call +
                          " after an exchange with a server failed: this worker has left the job");
  }
  if (finished_) {
    throw InvalidArgument(std::string("ParameterServer::") + call +
                          " after finish(): this worker has left the job");
  }
}

void WorkerRole::push() {
  check_usable("push()");
  COHORT_CHECK(!awaiting_,
               "ParameterServer::push() twice: call wait_for_parameters() between two pushes");
  auto span = trace(timeline_.get(), "push", "comm", "comm");
  std::vector<torch::Tensor> grads = gradients();
  if (node_) {
    // Hybrid: the node averages first, synchronously.
    const auto all = all_of(parameters_.size());
    torch::Tensor flat = flatten(grads, all);
    node_->allreduce(tensor_buffer(flat), {ReduceOp::kAvg});
    int64_t offset = 0;
    for (size_t i = 0; i < grads.size(); ++i) {
      grads[i] = flat.narrow(0, offset, grads[i].numel());
      offset += grads[i].numel();
    }
  }
  if (is_client()) {
    for (int s = 0; s < static_cast<int>(pairs_.size()); ++s) {
      outgoing_[static_cast<size_t>(s)] =
          flatten(grads, layout_.parameters_of_server[static_cast<size_t>(s)]).contiguous();
      request(s, MessageKind::kPush, reply_deadline(timeout_));
    }
  }
  ++clock_;
  awaiting_ = true;
}

void WorkerRole::wait_for_parameters() {
  check_usable("wait_for_parameters()");
  if (!awaiting_) return;
  auto span = trace(timeline_.get(), "wait for parameters", "comm", "comm");
  awaiting_ = false;
  if (is_client()) receive_replies();
  if (node_) share_within_node();
}

void WorkerRole::finish() {
  check_usable("finish()");
  wait_for_parameters();
  if (is_client()) {
    for (int s = 0; s < static_cast<int>(pairs_.size()); ++s) {
      request(s, MessageKind::kDone, kFinishDeadline);
    }
    receive_replies();
  }
  if (node_) share_within_node();
  finished_ = true;
}

int64_t WorkerRole::parameter_version() const {
  return *std::min_element(versions_.begin(), versions_.end());
}

void WorkerRole::serve() {
  throw InvalidArgument("ParameterServer::serve() is for servers; rank " +
                        std::to_string(group_->rank()) + " is a worker: train and push()");
}

ServerStats WorkerRole::stats() const {
  throw InvalidArgument("ParameterServer::stats() is kept by the servers; rank " +
                        std::to_string(group_->rank()) + " is a worker");
}

[[noreturn]] void WorkerRole::server_failed(int server, const std::exception& error) {
  const int rank = layout_.servers[static_cast<size_t>(server)];
  const std::string what = with_group_ranks(error.what(), rank, group_->rank());
  broken_ = true;
  abandon("worker rank " + std::to_string(group_->rank()) + " lost parameter server rank " +
          std::to_string(rank));
  if (what.find(kHeldUp) != std::string::npos) throw TimeoutError("ParameterServer: " + what);
  if (dynamic_cast<const TimeoutError*>(&error) != nullptr) {
    throw TimeoutError("ParameterServer: no answer in time from parameter server rank " +
                       std::to_string(rank) + ": " + what);
  }
  throw PeerError(rank, "ParameterServer: lost parameter server rank " + std::to_string(rank) +
                            " (server " + std::to_string(server) + "): " + what);
}

}  // namespace cohort::ps
