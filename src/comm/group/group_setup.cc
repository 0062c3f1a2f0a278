// GroupSetup (group_setup.h): how a group learns its shape when it is made.
#include "group/group_setup.h"

#include <algorithm>
#include <chrono>

#include "backends/collective_engine.h"
#include "cohort/comm/prefix_store.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {

Milliseconds left(Deadline deadline) {
  return std::chrono::duration_cast<Milliseconds>(deadline.remaining());
}

}  // namespace

GroupLayout GroupSetup::discover() const {
  const Deadline deadline = Deadline::after(options_.timeout);
  std::vector<HostInfo> hosts =
      exchange_host_info(*store_, rank_, size_, options_.node_id, deadline);
  std::vector<std::string> node_keys;
  for (const HostInfo& host : hosts) node_keys.push_back(host.node_key);
  GroupLayout layout(Topology::from_node_keys(node_keys, rank_));
  layout.hosts = std::move(hosts);
  layout.cost_model = agree_on_cost_model(deadline);
  open_shared_memory(layout, deadline);
  return layout;
}

GroupLayout GroupSetup::discover_through_engine() const {
  const Deadline deadline = Deadline::after(options_.timeout);
  GroupLayout layout(Topology::from_node_keys(engine_->node_keys(deadline), rank_));
  layout.cost_model = agree_on_cost_model(deadline);
  return layout;
}

GroupLayout GroupSetup::one_process() const {
  GroupLayout layout(Topology::single_node(rank_, size_));
  layout.cost_model = agree_on_cost_model(Deadline::after(options_.timeout));
  return layout;
}

GroupLayout GroupSetup::inherit(const GroupLayout& parent, const std::vector<int>& members,
                                Deadline deadline) const {
  GroupLayout layout(parent.topology.restricted_to(members, rank_));
  layout.cost_model = parent.cost_model;
  if (!parent.hosts.empty()) {
    for (int member : members) layout.hosts.push_back(parent.hosts[static_cast<size_t>(member)]);
  }
  // A subgroup's ranks on one host share memory as the whole group's do (issue 35: FSDP's
  // reduce-scatter group ran over loopback TCP). Not without a store (MPI: its engine's own).
  if (store_ && !layout.hosts.empty()) open_shared_memory(layout, deadline);
  return layout;
}

// Every rank must choose the same algorithm for the same call, so all take rank 0's model
// (a calibration file on one machine of a cluster is enough). Its source travels on the first
// line, so that a subgroup's rank 0 reports it too.
CostModel GroupSetup::agree_on_cost_model(Deadline deadline) const {
  CostModel model = CostModel::defaults();
  std::string text;
  if (rank_ == 0) {
    try {
      model = CostModel::load_default();
      std::replace(model.source.begin(), model.source.end(), '\n', ' ');
      text = model.source + "\n" + model.to_json();
    } catch (const ConfigError& e) {
      text = std::string("error: ") + e.what();
    }
  }
  text = share_from_rank0(text, "cost_model", deadline);
  if (text.rfind("error: ", 0) == 0) {
    throw ConfigError(rank_ == 0 ? text.substr(7)
                                 : "rank 0 could not read its cost model: " + text.substr(7));
  }
  if (rank_ != 0) {
    const size_t end_of_source = text.find('\n');
    model = CostModel::from_json(text.substr(end_of_source + 1), "rank 0's cost model");
    model.source = text.substr(0, end_of_source);
  }
  return model;
}

std::string GroupSetup::share_from_rank0(const std::string& text, const std::string& key,
                                         Deadline deadline) const {
  if (store_) {
    if (rank_ == 0) {
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
void GroupSetup::open_shared_memory(GroupLayout& layout, Deadline deadline) const {
  const std::vector<int>& mates = layout.topology.ranks_of_node(layout.topology.node_rank());
  bool possible = options_.shared_memory && mates.size() > 1;
  for (int r : mates) {
    if (layout.hosts[static_cast<size_t>(r)].identity !=
        layout.hosts[static_cast<size_t>(rank_)].identity) {
      possible = false;
    }
  }
  if (possible) {
    PrefixStore node_store("node" + std::to_string(layout.topology.node_rank()), store_);
    std::vector<pid_t> pids;  // watched until each rank attaches: one may die before it does
    for (int r : mates) pids.push_back(layout.hosts[static_cast<size_t>(r)].pid);
    layout.shm =
        ShmWindow::create(node_store, layout.topology.local_rank(), layout.topology.local_size(),
                          mates, pids, options_.job_token, ShmWindow::kSlotBytes, deadline);
  }
  const bool ready = layout.shm != nullptr || mates.size() == 1;
  store_->set("shm-ready/" + std::to_string(rank_), ready ? "1" : "0");
  layout.shared_memory_everywhere = true;
  for (int r = 0; r < size_; ++r) {
    if (store_->get_string("shm-ready/" + std::to_string(r), left(deadline)) != "1") {
      layout.shared_memory_everywhere = false;
    }
  }
}

}  // namespace cohort
