// Which ranks of a group share a host (a "node"): found once when the group is made, then used
// to put shared memory inside a node and to choose hierarchical algorithms across nodes.
//
// Nodes are numbered in the order of their lowest rank; ranks within a node in rank order.
// `local_rank` and `node_rank` follow torchrun's meaning (LOCAL_RANK, GROUP_RANK).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace cohort {

class Store;

class Topology {
 public:
  // Every rank on one node (threads of one process, or a world of one).
  static Topology single_node(int rank, int size);
  // Every rank on a node of its own: what a group assumes when it cannot know better.
  static Topology one_rank_per_node(int rank, int size);
  // node_keys[r] names rank r's node; equal keys are one node.
  static Topology from_node_keys(const std::vector<std::string>& node_keys, int rank);

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(node_of_.size()); }
  int local_rank() const { return local_rank_; }
  int local_size() const { return static_cast<int>(ranks_of_node(node_rank()).size()); }
  int node_rank() const { return node_of_[static_cast<size_t>(rank_)]; }
  int num_nodes() const { return static_cast<int>(members_.size()); }
  int node_of(int rank) const { return node_of_[static_cast<size_t>(rank)]; }
  // Ranks of node `node`, ascending.
  const std::vector<int>& ranks_of_node(int node) const {
    return members_[static_cast<size_t>(node)];
  }
  // Every node has the same number of ranks (what hierarchical algorithms need), else 0.
  int uniform_local_size() const;
  // The ranks with this rank's local rank, one per node, in node order (uniform topologies).
  std::vector<int> peers_across_nodes() const;

  // The topology of a subgroup made of `members` (ranks of this topology, in subgroup order).
  Topology restricted_to(const std::vector<int>& members, int new_rank) const;

 private:
  Topology(std::vector<int> node_of, int rank);

  std::vector<int> node_of_;               // rank -> node
  std::vector<std::vector<int>> members_;  // node -> ranks
  int rank_ = 0;
  int local_rank_ = 0;
};

// What one rank says about its host: the name of its node, and the identity that tells
// whether two ranks can share memory.
struct HostInfo {
  std::string node_key;  // GroupOptions::node_id when set, else `identity`
  std::string identity;  // boot id and PID/IPC/network namespaces: same value, same memory
  // The rank's process, for ranks of the same identity to watch each other's (a rank that
  // dies before it attaches to shared memory is named at once, Note [Shared-memory lifetime]).
  pid_t pid = 0;
};

// This process's host; `node_id`, when not empty, names the node.
HostInfo this_host(const std::string& node_id);

// Collective over the store: every rank's HostInfo, indexed by rank.
std::vector<HostInfo> exchange_host_info(Store& store, int rank, int size,
                                         const std::string& node_id, Deadline deadline);

}  // namespace cohort
