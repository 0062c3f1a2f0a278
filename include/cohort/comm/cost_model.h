// The alpha-beta cost model that the automatic algorithm choice minimizes (docs/algorithms.md,
// "Cost model"), and the planner predicts step times with (docs/planner.md). A link costs alpha per
// message (or per shared-memory round) and beta per byte; reducing costs gamma per byte. Each
// algorithm's time is a sum of those terms with counts that follow from its steps (the header
// comment of each algorithm file).
//
// The parameters come from `cohort-bench --calibrate`, which measures them on this machine and
// writes a JSON file; without one, the defaults were measured on the 2-core development VM.
#pragma once

#include <cstddef>
#include <string>

#include "cohort/comm/options.h"

namespace cohort {

struct LinkCost {
  double alpha_s = 0;          // seconds per message or round
  double beta_s_per_byte = 0;  // seconds per byte moved
};

struct CostModel {
  LinkCost tcp;  // between ranks over TCP (loopback or the network between hosts)
  LinkCost shm;  // one round through a node's shared memory window; beta per byte copied
  double gamma_s_per_byte = 0;  // reducing one byte into another (float32 sum)
  // Where the numbers came from, for the group's log line (group_report.h): one line of text.
  std::string source = "built-in defaults";

  static CostModel defaults();
  // Reads the file `cohort-bench --calibrate` writes; throws ConfigError naming the file and
  // the field when it is unreadable or a value is missing or not a positive number.
  static CostModel from_file(const std::string& path);
  static CostModel from_json(const std::string& text, const std::string& origin);
  std::string to_json() const;

  // Where a calibration is read from and written to: COHORT_COST_MODEL, else
  // $XDG_CACHE_HOME/cohort/cost_model.json, else ~/.cache/cohort/cost_model.json.
  static std::string default_path();
  // The calibration at default_path() when there is one, else defaults().
  static CostModel load_default();
};

// What the choice knows of a group's shape.
struct GroupShape {
  int world = 1;
  int nodes = 1;
  int local_size = 1;          // ranks per node when every node has the same number, else 0
  bool shared_memory = false;  // every node with several ranks has a shared memory window
  bool engine = false;         // the transport sits on an engine with its own collectives (MPI)
};

// Predicted seconds for an allreduce of `bytes` per rank with `algorithm` (kHierarchical: with
// the best flat algorithm across nodes). Algorithms that cannot run on `shape` get infinity.
double predict_allreduce(Algorithm algorithm, size_t bytes, const GroupShape& shape,
                         const CostModel& model);
// The algorithm with the lowest predicted time (ties: direct, ring, hd, tree, shm,
// hierarchical, in that order).
Algorithm cheapest_allreduce(size_t bytes, const GroupShape& shape, const CostModel& model);
// The flat algorithm for hierarchical allreduce's phase across the nodes of `shape`.
Algorithm cheapest_across_nodes(size_t bytes, const GroupShape& shape, const CostModel& model);

// Predicted seconds for an all-gather (`bytes`: its output per rank) or a reduce-scatter
// (`bytes`: its input per rank) with `algorithm` (kDirect, kRing, kHalvingDoubling, or kShm in
// one node with shared memory; infinity for the others). Each moves (n-1)/n of the buffer per
// rank once; a reduce-scatter also reduces it.
double predict_gather_or_scatter(CollectiveKind kind, Algorithm algorithm, size_t bytes,
                                 const GroupShape& shape, const CostModel& model);
// Predicted seconds for `kind` (kAllreduce, kAllgather or kReduceScatter) of `bytes` with the
// algorithm a group of `shape` chooses automatically (algorithm_choice.cc): what a caller that
// plans collectives (the planner, docs/planner.md) asks. Infinity for other kinds.
double predict_automatic(CollectiveKind kind, size_t bytes, const GroupShape& shape,
                         const CostModel& model);

}  // namespace cohort
