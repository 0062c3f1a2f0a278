#include "node_rendezvous.h"

#include <unistd.h>

#include <csignal>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "cohort/comm/etcd_store.h"
#include "cohort/comm/job_store.h"
#include "cohort/core/error.h"
#include "stop_signals.h"

namespace cohort::run {

namespace {

constexpr Milliseconds kPollInterval{100};

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

void throw_if_interrupted() {
  if (const int signal = received_stop_signal()) throw Interrupted(signal);
}

std::unique_ptr<TcpStore> connect_tcp(const LaunchOptions& options, const std::string& token) {
  TcpStoreOptions store;
  store.host = options.master_addr;
  store.port = static_cast<uint16_t>(options.master_port < 0 ? 0 : options.master_port);
  store.is_server = options.node_rank == 0;
  // One node: nothing outside this machine needs the store.
  store.bind_host = options.multi_node() ? "" : "127.0.0.1";
  store.token = token;
  store.timeout = options.rdzv_timeout();
  try {
    return std::make_unique<TcpStore>(store);
  } catch (const StoreError& e) {
    throw StoreError("cannot reach node 0 within " +
                     std::to_string(options.rdzv_timeout().count() / 1000) +
                     " s (--rdzv-timeout): " + e.what() +
                     " Check --master-addr and --master-port, that node 0 runs cohortrun, and " +
                     "that every node has the same COHORT_JOB_TOKEN.");
  }
}

// The job's keys, as the ranks' connect_job_store() has them (cohort/comm/job_store.h).
std::unique_ptr<EtcdStore> connect_etcd(const LaunchOptions& options, const std::string& token,
                                        const std::string& job_id) {
  EtcdStoreOptions etcd;
  etcd.endpoints = parse_etcd_endpoints(options.rdzv_endpoints);
  etcd.prefix = etcd_job_prefix(job_id);
  etcd.token = token;
  etcd.timeout = options.rdzv_timeout();
  // A cohortrun that cannot reach etcd for as long as the others wait to hear from a node
  // (--node-timeout) is cut off as such a node is: it stops its ranks then, not later. An
  // election after an etcd member's death takes about a second, hence the floor.
  etcd.unavailable_timeout =
      std::min(etcd.unavailable_timeout, std::max(options.node_timeout(), Milliseconds(2000)));
  return std::make_unique<EtcdStore>(etcd);
}

}  // namespace

Interrupted::Interrupted(int signal)
    : Error("interrupted by " + signal_name(signal)), signal_(signal) {}

NodeRendezvous::NodeRendezvous(const LaunchOptions& options, const std::string& token,
                               const std::string& etcd_job_id)
    : options_(options), etcd_job_id_(etcd_job_id) {
  if (options.on_etcd()) {
    store_ = connect_etcd(options, token, etcd_job_id);
    return;
  }
  auto tcp = connect_tcp(options, token);
  tcp_store_ = tcp.get();
  store_ = std::move(tcp);
}

std::string NodeRendezvous::where() const {
  if (options_.on_etcd()) return "etcd (" + options_.rdzv_endpoints + ")";
  return "node 0's store at " + options_.master_addr + ":" + std::to_string(port());
}

std::string NodeRendezvous::agree_on_job_id(const std::optional<std::string>& mine,
                                            const std::string& fresh) {
  if (options_.on_etcd()) return etcd_job_id_;  // its keys are under it
  const std::string key = "cohortrun/job_id";
  if (options_.node_rank == 0) {
    const std::string id = mine.value_or(fresh);
    store_->set(key, id);
    return id;
  }
  const std::string id = store_->get_string(key, options_.rdzv_timeout());
  if (mine && *mine != id) {
    throw ConfigError("COHORT_JOB_ID='" + *mine + "': node " + std::to_string(options_.node_rank) +
                      " was started for that job, but " + where() + " serves job '" + id +
                      "'. Give every node the job's COHORT_JOB_ID, or " +
                      "point --master-addr and --master-port at the node 0 of its own job");
  }
  return id;
}

std::string NodeRendezvous::key(int attempt, const std::string& name) const {
  return "cohortrun/" + std::to_string(attempt) + "/" + name;
}

std::string NodeRendezvous::node_key(int attempt, int node) const {
  return key(attempt, "node/" + std::to_string(node));
}

void NodeRendezvous::join(int attempt) {
  claim_node_rank(attempt);
  store_->set(node_key(attempt, options_.node_rank),
              std::to_string(options_.nproc_per_node) + " " + host_name());
  std::vector<std::string> keys;
  for (int node = 0; node < options_.nnodes; ++node) keys.push_back(node_key(attempt, node));
  const Deadline deadline = Deadline::after(options_.rdzv_timeout());
  for (;;) {
    try {
      store_->wait(keys, std::min(deadline.remaining(), kPollInterval));
      break;
    } catch (const TimeoutError&) {
      throw_if_interrupted();
      if (!deadline.expired()) continue;
      throw TimeoutError(
          "rendezvous timed out after " + std::to_string(options_.rdzv_timeout().count() / 1000) +
          " s (--rdzv-timeout): node rank(s) " + missing_nodes(attempt) + " never arrived of the " +
          std::to_string(options_.nnodes) + " nodes expected at " + where() +
          ". Start cohortrun on every node with the same --nnodes and " +
          (options_.on_etcd() ? "--rdzv-endpoints and COHORT_JOB_ID"
                              : "--master-addr and --master-port"));
    }
  }
  check_same_ranks_per_node(attempt);
}

void NodeRendezvous::join_running_job() {
  claim_node_rank(0);
  store_->set(node_key(0, options_.node_rank),
              std::to_string(options_.nproc_per_node) + " " + host_name());
  check_ranks_of(0, 0);
}

void NodeRendezvous::claim_node_rank(int attempt) {
  if (store_->add(key(attempt, "claim/" + std::to_string(options_.node_rank)), 1) <= 1) return;
  std::string what = "another node already joined as --node-rank " +
                     std::to_string(options_.node_rank) + ": every node needs its own --node-rank";
  if (options_.on_etcd()) {
    what += " (or etcd still holds the keys of an earlier run of job '" + etcd_job_id_ +
            "': delete them with etcdctl del --prefix " + etcd_job_prefix(etcd_job_id_) + ")";
  }
  if (options_.elastic()) {
    what += " (a node that joins the running job takes one that no node of the job has used, " +
            std::to_string(options_.nnodes) + " or above)";
  } else {
    what += " in [0, " + std::to_string(options_.nnodes) + ")";
  }
  throw ConfigError(what);
}

std::string NodeRendezvous::missing_nodes(int attempt) {
  std::string missing;
  for (int node = 0; node < options_.nnodes; ++node) {
    try {
      store_->wait({node_key(attempt, node)}, Milliseconds(1));
    } catch (const TimeoutError&) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(node);
    }
  }
  return missing;
}

void NodeRendezvous::check_same_ranks_per_node(int attempt) {
  for (int node = 0; node < options_.nnodes; ++node) check_ranks_of(attempt, node);
}

void NodeRendezvous::check_ranks_of(int attempt, int node) {
  std::istringstream entry(store_->get_string(node_key(attempt, node), options_.rdzv_timeout()));
  int ranks = 0;
  std::string host;
  entry >> ranks >> host;
  if (ranks != options_.nproc_per_node) {
    throw ConfigError("node " + std::to_string(node) + " (" + host + ") runs " +
                      std::to_string(ranks) + " ranks, this node " +
                      std::to_string(options_.nproc_per_node) +
                      ": give every node the same --nproc-per-node");
  }
}

std::optional<std::string> NodeRendezvous::failure(int attempt) {
  if (store_->add(key(attempt, "failed"), 0) == 0) return std::nullopt;
  return store_->get_string(key(attempt, "failure"), options_.rdzv_timeout());
}

void NodeRendezvous::report_failure(int attempt, const std::string& what) {
  const std::string report = "node " + std::to_string(options_.node_rank) + ": " + what;
  store_->compare_set(key(attempt, "failure"), {}, to_bytes(report));  // the first one stays
  store_->add(key(attempt, "failed"), 1);
}

void NodeRendezvous::report_done(int attempt) {
  store_->add(key(attempt, "done"), 1);
}

NodeRendezvous::Others NodeRendezvous::wait_for_others(int attempt) {
  Others others;
  const Deadline deadline = Deadline::after(options_.rdzv_timeout());
  while (!deadline.expired()) {
    others.failure = failure(attempt);
    others.all_done = store_->add(key(attempt, "done"), 0) >= options_.nnodes;
    if (others.failure || others.all_done) break;
    throw_if_interrupted();
    std::this_thread::sleep_for(kPollInterval);
  }
  if (others.all_done) leave(attempt, deadline);
  return others;
}

void NodeRendezvous::leave(int attempt, Deadline deadline) {
  store_->add(key(attempt, "left"), 1);
  if (options_.node_rank != 0 || options_.on_etcd()) return;
  while (store_->add(key(attempt, "left"), 0) < options_.nnodes && !deadline.expired()) {
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace cohort::run
