// How a group learns its shape once, when it is made: which ranks share a host, the cost model
// every rank chooses algorithms with, and the shared memory window of each node. The result, a
// GroupLayout, is handed to the group's dispatcher (what the choice weighs) and kept for its
// runs (the window and the topology that the algorithms see).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/collective_engine.h"
#include "cohort/comm/cost_model.h"
#include "cohort/comm/group.h"
#include "cohort/comm/store.h"
#include "topology/topology.h"
#include "transport/shm/shm_window.h"

namespace cohort {

struct GroupLayout {
  explicit GroupLayout(Topology t) : topology(std::move(t)) {}

  Topology topology;
  CostModel cost_model = CostModel::defaults();
  std::vector<HostInfo> hosts;     // every rank's host, by rank; empty where none were exchanged
  std::unique_ptr<ShmWindow> shm;  // this rank's node's window, when it has several ranks
  bool shared_memory_everywhere = false;  // every node with several ranks has a window
};

// One-shot: each method is collective over the group and returns the group's layout.
class GroupSetup {
 public:
  // `store` may be null only for a group whose engine carries its own bookkeeping (MPI);
  // `engine` may be null for any other.
  GroupSetup(int rank, int size, std::shared_ptr<Store> store, CollectiveEngine* engine,
             const GroupOptions& options)
      : rank_(rank), size_(size), store_(std::move(store)), engine_(engine), options_(options) {}

  // Group::create: hosts through the store, rank 0's cost model, a window per node.
  GroupLayout discover() const;
  // A group without a store (the MPI backend): the engine says which ranks share a host, and
  // rank 0's cost model is broadcast through it.
  GroupLayout discover_through_engine() const;
  // Group::create_inproc: every rank a thread of this process, rank 0's cost model.
  GroupLayout one_process() const;
  // A subgroup of `parent` (`members`: their ranks there, in this group's order): its members'
  // part of the parent's topology and hosts, the parent's cost model, and a shared memory
  // window among the members of each node that can share one.
  GroupLayout inherit(const GroupLayout& parent, const std::vector<int>& members,
                      Deadline deadline) const;

 private:
  CostModel agree_on_cost_model(Deadline deadline) const;
  // Rank 0's `text` on every rank, through the store (under `key`) or else the engine.
  std::string share_from_rank0(const std::string& text, const std::string& key,
                               Deadline deadline) const;
  // Collective over the store: a window among the ranks of each node that can share one.
  void open_shared_memory(GroupLayout& layout, Deadline deadline) const;

  int rank_, size_;
  std::shared_ptr<Store> store_;
  CollectiveEngine* engine_;
  const GroupOptions& options_;
};

}  // namespace cohort
