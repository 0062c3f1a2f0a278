#include "group/group_report.h"

#include <cstdio>
#include <sstream>
#include <vector>

#include "choice/algorithm_choice.h"
#include "cohort/core/logging.h"

namespace cohort {

namespace {

// "0-3", "0,2,4" or, past a dozen, the first ones and how many more.
std::string rank_list(const std::vector<int>& ranks) {
  constexpr size_t kShown = 12;
  std::ostringstream out;
  if (ranks.size() > 1 && ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) {
    out << ranks.front() << "-" << ranks.back();
    return out.str();
  }
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) out << (i ? "," : "") << ranks[i];
  if (ranks.size() > kShown) out << ",... (" << ranks.size() << " ranks)";
  return out.str();
}

std::string nodes_text(const Topology& topology) {
  constexpr int kListed = 8;
  std::ostringstream out;
  const int nodes = topology.num_nodes();
  out << topology.size() << (topology.size() == 1 ? " rank" : " ranks") << " on " << nodes
      << (nodes == 1 ? " node" : " nodes");
  if (nodes > kListed) {
    const int local = topology.uniform_local_size();
    if (local > 0) out << " of " << local << " local ranks each";
    return out.str();
  }
  out << " (";
  for (int n = 0; n < nodes; ++n) {
    out << (n ? "; " : "") << "node " << n << ": ranks " << rank_list(topology.ranks_of_node(n));
  }
  out << ")";
  return out.str();
}

// Which transport carries the bytes between two ranks of one node, and between nodes.
std::string transports_text(const GroupReport& r) {
  if (!r.engine.empty() && !r.device_engine) {
    return "transport: " + r.engine + "'s own, inside and across nodes";
  }
  if (r.transport == "inproc") return "transport: in-process (threads of this process)";
  const GroupShape& s = r.shape;
  std::string inside;
  if (s.world == s.nodes) {
    inside = "none (one rank per node)";
  } else if (s.shared_memory && s.nodes == 1) {
    inside = "shared memory for allreduce, broadcast, allgather, reduce-scatter and barrier, " +
             r.transport + " for the rest";
  } else if (s.shared_memory) {
    inside = r.transport + ", shared memory inside hierarchical allreduce";
  } else {
    inside = r.transport + (r.shared_memory_asked
                                ? " (no shared memory: some node's ranks cannot share it)"
                                : " (shared memory off: COHORT_SHM=0)");
  }
  const std::string across = s.nodes > 1 ? r.transport : "none (one node)";
  return "inside a node: " + inside + "; across nodes: " + across;
}

std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

std::string algorithms_text(const GroupReport& r) {
  std::ostringstream out;
  out << (r.device_engine ? "host allreduce algorithm" : "allreduce algorithm");
  if (r.algorithm != Algorithm::kAuto)
    out << " (group default " << algorithm_name(r.algorithm) << ")";
  out << " by size:";
  const char* separator = " ";
  for (size_t bytes : {size_t{4} << 10, size_t{256} << 10, size_t{16} << 20, size_t{256} << 20}) {
    const Algorithm chosen =
        choose_algorithm(CollectiveKind::kAllreduce, r.algorithm, bytes, r.shape, r.cost_model);
    out << separator << size_text(bytes) << " " << algorithm_name(chosen);
    separator = ", ";
  }
  return out.str();
}

std::string cost_model_text(const CostModel& m) {
  char numbers[160];
  std::snprintf(numbers, sizeof numbers,
                "tcp %.3g us + %.3g GB/s, shm %.3g us + %.3g GB/s, reduce %.3g GB/s",
                m.tcp.alpha_s * 1e6, 1e-9 / m.tcp.beta_s_per_byte, m.shm.alpha_s * 1e6,
                1e-9 / m.shm.beta_s_per_byte, 1e-9 / m.gamma_s_per_byte);
  return "cost model from " + m.source + " (" + numbers + ")";
}

std::string backend_text(const GroupReport& r) {
  const std::string native = "cohort's algorithms over " + r.transport;
  if (r.engine.empty()) return native;
  if (r.device_engine) return r.engine + " for device buffers, " + native + " for host buffers";
  return r.engine;
}

}  // namespace

std::string describe_group(const GroupReport& r) {
  std::ostringstream out;
  out << "group '" << r.name << "': " << nodes_text(r.topology) << "; backend: " << backend_text(r)
      << "; " << transports_text(r) << "; " << algorithms_text(r) << "; "
      << cost_model_text(r.cost_model) << "; timeout " << r.timeout.count() / 1000.0 << " s"
      << (r.debug_checks ? "; COHORT_DEBUG=detail checks on" : "");
  return out.str();
}

void log_group_created(const GroupReport& r) {
  if (r.topology.rank() == 0 && log_enabled(LogLevel::kInfo)) {
    log_message(LogLevel::kInfo, describe_group(r));
  }
  COHORT_LOG(kDebug, "group '", r.name, "': rank ", r.topology.rank(), " of ", r.topology.size(),
             " is local rank ", r.topology.local_rank(), " of ", r.topology.local_size(),
             " on node ", r.topology.node_rank());
}

}  // namespace cohort
