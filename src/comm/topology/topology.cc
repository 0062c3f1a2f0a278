#include "topology/topology.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "cohort/comm/store.h"
#include "cohort/core/check.h"

namespace cohort {

Topology::Topology(std::vector<int> node_of, int rank) : node_of_(std::move(node_of)), rank_(rank) {
  COHORT_INTERNAL_ASSERT(rank >= 0 && static_cast<size_t>(rank) < node_of_.size(), "rank ", rank,
                         " outside a topology of ", node_of_.size());
  for (size_t r = 0; r < node_of_.size(); ++r) {
    const auto node = static_cast<size_t>(node_of_[r]);
    if (members_.size() <= node) members_.resize(node + 1);
    if (static_cast<int>(r) == rank) local_rank_ = static_cast<int>(members_[node].size());
    members_[node].push_back(static_cast<int>(r));
  }
}

Topology Topology::single_node(int rank, int size) {
  return Topology(std::vector<int>(static_cast<size_t>(size), 0), rank);
}

Topology Topology::one_rank_per_node(int rank, int size) {
  std::vector<int> node_of(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) node_of[static_cast<size_t>(r)] = r;
  return Topology(std::move(node_of), rank);
}

Topology Topology::from_node_keys(const std::vector<std::string>& node_keys, int rank) {
  std::vector<std::string> seen;  // node keys in order of their lowest rank
  std::vector<int> node_of;
  for (const std::string& key : node_keys) {
    auto it = std::find(seen.begin(), seen.end(), key);
    if (it == seen.end()) it = seen.insert(seen.end(), key);
    node_of.push_back(static_cast<int>(it - seen.begin()));
  }
  return Topology(std::move(node_of), rank);
}

int Topology::uniform_local_size() const {
  const size_t first = members_.front().size();
  for (const auto& node : members_) {
    if (node.size() != first) return 0;
  }
  return static_cast<int>(first);
}

std::vector<int> Topology::peers_across_nodes() const {
  COHORT_INTERNAL_ASSERT(uniform_local_size() > 0, "peers across nodes need a uniform topology");
  std::vector<int> peers;
  for (const auto& node : members_) peers.push_back(node[static_cast<size_t>(local_rank_)]);
  return peers;
}

Topology Topology::restricted_to(const std::vector<int>& members, int new_rank) const {
  std::vector<std::string> keys;
  for (int r : members) keys.push_back(std::to_string(node_of(r)));
  return from_node_keys(keys, new_rank);
}

namespace {

std::string read_link(const char* path) {
  char buffer[256];
  const ssize_t n = ::readlink(path, buffer, sizeof(buffer) - 1);
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string("?");
}

Milliseconds left(Deadline deadline) {
  return std::chrono::duration_cast<Milliseconds>(deadline.remaining());
}

}  // namespace

HostInfo this_host(const std::string& node_id) {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  HostInfo info;
  info.identity = boot_id + "|" + read_link("/proc/self/ns/pid") + "|" +
                  read_link("/proc/self/ns/ipc") + "|" + read_link("/proc/self/ns/net");
  info.node_key = node_id.empty() ? info.identity : node_id;
  info.pid = ::getpid();
  return info;
}

std::vector<HostInfo> exchange_host_info(Store& store, int rank, int size,
                                         const std::string& node_id, Deadline deadline) {
  const HostInfo mine = this_host(node_id);
  store.set("host/" + std::to_string(rank) + "/node", mine.node_key);
  store.set("host/" + std::to_string(rank) + "/identity", mine.identity);
  store.set("host/" + std::to_string(rank) + "/pid", std::to_string(mine.pid));
  std::vector<HostInfo> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string prefix = "host/" + std::to_string(r);
    all[static_cast<size_t>(r)].node_key = store.get_string(prefix + "/node", left(deadline));
    all[static_cast<size_t>(r)].identity = store.get_string(prefix + "/identity", left(deadline));
    all[static_cast<size_t>(r)].pid =
        static_cast<pid_t>(std::stol(store.get_string(prefix + "/pid", left(deadline))));
  }
  return all;
}

}  // namespace cohort
