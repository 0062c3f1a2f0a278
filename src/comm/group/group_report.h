// What a group says when it is made, at COHORT_LOG_LEVEL=info: one line on the group's rank 0
// that tells what runs (backend, transport per class of peers, nodes, cost model, the allreduce
// algorithm by size), like NCCL_DEBUG=INFO. Every rank adds its own place at debug.
#pragma once

#include <string>

#include "cohort/comm/cost_model.h"
#include "topology/topology.h"

namespace cohort {

// What the line is made of; the group fills it in (group_topology.cc).
struct GroupReport {
  std::string name;                 // GroupOptions::name
  std::string transport;            // Transport::name(): tcp, inproc, mpi, nccl, ...
  std::string engine;               // the engine's name (MPI, NCCL), empty for cohort's algorithms
  bool device_engine = false;       // the engine takes device buffers only (NCCL)
  bool shared_memory_asked = true;  // GroupOptions::shared_memory (COHORT_SHM)
  bool debug_checks = false;
  Algorithm algorithm = Algorithm::kAuto;  // the group's default (COHORT_ALGO)
  Milliseconds timeout{0};
  Topology topology = Topology::single_node(0, 1);
  GroupShape shape;
  CostModel cost_model;
};

// The line rank 0 logs (without the logger's prefix).
std::string describe_group(const GroupReport& report);
// Logs describe_group on rank 0 at info and this rank's place at debug, when enabled.
void log_group_created(const GroupReport& report);

}  // namespace cohort
