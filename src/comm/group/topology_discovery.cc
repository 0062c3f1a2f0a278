// How a group learns its shape when it is made: which ranks share a host, the cost model every
// rank chooses algorithms with, and the shared memory window of each node.
#include <algorithm>
#include <chrono>

#include "backends/collective_engine.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/error.h"
#include "group/group_impl.h"
#include "group/group_report.h"

namespace cohort {

namespace {

Milliseconds left(Deadline deadline) {
  return std::chrono::duration_cast<Milliseconds>(deadline.remaining());
}

}  // namespace

void Group::Impl::discover_topology() {
  const Deadline deadline = Deadline::after(options_.timeout);
  hosts_ = exchange_host_info(*store_, rank(), size(), options_.node_id, deadline);
  std::vector<std::string> node_keys;
  for (const HostInfo& host : hosts_) node_keys.push_back(host.node_key);
  topology_ = Topology::from_node_keys(node_keys, rank());
  agree_on_cost_model(deadline);
  open_shared_memory(deadline);
  forget_choices();
  report_creation();
}

void Group::Impl::discover_topology_through_engine() {
  const Deadline deadline = Deadline::after(options_.timeout);
  topology_ = Topology::from_node_keys(engine_->node_keys(deadline), rank());
  agree_on_cost_model(deadline);
  forget_choices();
  report_creation();
}

void Group::Impl::share_one_process() {
  topology_ = Topology::single_node(rank(), size());
  agree_on_cost_model(Deadline::after(options_.timeout));
  forget_choices();
  report_creation();
}

void Group::Impl::inherit(const Impl& parent, const std::vector<int>& members, Deadline deadline) {
  topology_ = parent.topology_.restricted_to(members, rank());
  cost_model_ = parent.cost_model_;
  if (!parent.hosts_.empty()) {
    for (int member : members) hosts_.push_back(parent.hosts_[static_cast<size_t>(member)]);
  }
  // A subgroup's ranks on one host share memory as the whole group's do (issue 35: FSDP's
  // reduce-scatter group ran over loopback TCP). Not without a store (MPI: its engine's own).
  if (store_ && !hosts_.empty()) open_shared_memory(deadline);
  forget_choices();
}

// Every rank must choose the same algorithm for the same call, so all take rank 0's model
// (a calibration file on one machine of a cluster is enough). Its source travels on the first
// line, so that a subgroup's rank 0 reports it too.
void Group::Impl::agree_on_cost_model(Deadline deadline) {
  std::string text;
  if (rank() == 0) {
    try {
      cost_model_ = CostModel::load_default();
      std::replace(cost_model_.source.begin(), cost_model_.source.end(), '\n', ' ');
      text = cost_model_.source + "\n" + cost_model_.to_json();
    } catch (const ConfigError& e) {
      text = std::string("error: ") + e.what();
    }
  }
  text = share_from_rank0(text, "cost_model", deadline);
  if (text.rfind("error: ", 0) == 0) {
    throw ConfigError(rank() == 0 ? text.substr(7)
                                  : "rank 0 could not read its cost model: " + text.substr(7));
  }
  if (rank() != 0) {
    const size_t end_of_source = text.find('\n');
    cost_model_ = CostModel::from_json(text.substr(end_of_source + 1), "rank 0's cost model");
    cost_model_.source = text.substr(0, end_of_source);
  }
}

void Group::Impl::report_creation() {
  GroupReport report;
  report.name = options_.name;
  report.transport = transport_->name();
  if (engine_) {
    report.engine = engine_->engine_name();
    report.device_engine = !engine_->handles_host_memory();
  }
  report.shared_memory_asked = options_.shared_memory;
  report.debug_checks = options_.debug_checks;
  report.algorithm = options_.algorithm;
  report.timeout = options_.timeout;
  report.topology = topology_;
  report.shape = shape();
  report.cost_model = cost_model_;
  log_group_created(report);
}

std::string Group::Impl::share_from_rank0(const std::string& text, const std::string& key,
                                          Deadline deadline) {
  if (store_) {
    if (rank() == 0) {
      store_->set(key, text);
      return text;
    }
    return store_->get_string(key, left(deadline));
  }
  CollectiveEngine& engine = *engine_;
  uint64_t length = text.size();
  engine.broadcast(&length, sizeof length, DType::kUInt8, 0, deadline);
  std::string shared = text;
  shared.resize(length);
  engine.broadcast(shared.data(), length, DType::kUInt8, 0, deadline);
  return shared;
}

// Note [Shared-memory lifetime] in shm_window.h. The ranks of a node share a window when they
// see the same memory (same boot and namespaces: COHORT_NODE_ID may group ranks that do not).
// Whether every node got one decides which algorithms may run, so all ranks agree on it.
void Group::Impl::open_shared_memory(Deadline deadline) {
  const std::vector<int>& mates = topology_.ranks_of_node(topology_.node_rank());
  bool possible = options_.shared_memory && mates.size() > 1;
  for (int r : mates) {
    if (hosts_[static_cast<size_t>(r)].identity != hosts_[static_cast<size_t>(rank())].identity) {
      possible = false;
    }
  }
  if (possible) {
    PrefixStore node_store("node" + std::to_string(topology_.node_rank()), store_);
    std::vector<pid_t> pids;  // watched until each rank attaches: one may die before it does
    for (int r : mates) pids.push_back(hosts_[static_cast<size_t>(r)].pid);
    shm_ = ShmWindow::create(node_store, topology_.local_rank(), topology_.local_size(), mates,
                             pids, options_.job_token, ShmWindow::kSlotBytes, deadline);
  }
  const bool ready = shm_ != nullptr || mates.size() == 1;
  store_->set("shm-ready/" + std::to_string(rank()), ready ? "1" : "0");
  shared_memory_everywhere_ = true;
  for (int r = 0; r < size(); ++r) {
    if (store_->get_string("shm-ready/" + std::to_string(r), left(deadline)) != "1") {
      shared_memory_everywhere_ = false;
    }
  }
}

}  // namespace cohort
