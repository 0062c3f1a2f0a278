// What cohortrun was asked to do: its command line (docs/launch.md, "cohortrun").
#pragma once

#include <string>
#include <vector>

#include "cohort/core/deadline.h"

namespace CLI {
class App;  // CLI11's, included only by the files that build the command line
}  // namespace CLI

namespace cohort::run {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // -1: one node picks a free port; several nodes meet at kDefaultMasterPort.
  int master_port = -1;
  int max_restarts = 0;
  double rdzv_timeout_s = 300;
  // Between the SIGTERM that asks ranks to stop and the SIGKILL that makes them.
  double stop_timeout_s = 5;
  // How long ranks stopped by a signal (SIGSTOP) may stay stopped once every other rank has
  // ended: nothing in the job can continue them, so cohortrun then ends them.
  double stopped_timeout_s = 30;
  // > 1: this machine's ranks stand for that many nodes (contiguous blocks of ranks), through
  // COHORT_NODE_ID, to try HYBRID_SHARD, hierarchical allreduce or --hybrid on one host.
  int simulate_nodes = 1;
  bool prefix_output = true;
  int tail_lines = 10;  // of each failed rank's output, in the failure summary
  // Ranks whose failure does not stop the job (parameter-server workers: the servers go on
  // without them; docs/async.md). The job succeeds when every other rank does.
  std::vector<int> expendable;
  std::string expendable_list;  // as given: "1,2"
  // Elastic mode (--min-ranks; docs/launch.md, "Elastic mode"): 0 off. A failed rank is
  // restarted alone and rejoins the running job, which goes on while min_ranks remain.
  int min_ranks = 0;
  int max_ranks = 0;  // at most this many members at once (COHORT_ELASTIC_MAX_RANKS); 0: no limit
  // Elastic mode on several nodes: a node whose cohortrun has not been heard from (its
  // heartbeat in the store) for this long is taken for lost (docs/launch.md, "Elastic mode").
  double node_timeout_s = 10;
  // Exit codes that say the program cannot run as it was started (a usage or configuration
  // error: a restart would fail the same way). A rank that exits with one is not restarted, in
  // either mode (--no-restart-exit-codes; docs/launch.md, "Restarts"): 2 (CLI11's and the
  // examples' usage errors), 64 (EX_USAGE) and 78 (EX_CONFIG) unless the command line says
  // otherwise ("none": every failure may be restarted).
  std::vector<int> no_restart_exit_codes = {2, 64, 78};
  std::string no_restart_exit_codes_list;  // as given
  std::vector<std::string> command;        // the program and its arguments
  // --rdzv-backend: where the ranks' store is. "tcp": the one this cohortrun hosts; "etcd":
  // the etcd cluster at --rdzv-endpoints (COHORT_RDZV_BACKEND, COHORT_RDZV_ENDPOINTS; docs/
  // store.md, "etcd"), where the cohortruns of several nodes meet too, so that no node holds
  // the job's store.
  std::string rdzv_backend = "tcp";
  std::string rdzv_endpoints;

  static constexpr int kDefaultMasterPort = 29500;

  int world_size() const { return nproc_per_node * nnodes; }
  // Several nodes: --nnodes above 1, or a node joining a running elastic job.
  bool multi_node() const { return nnodes > 1 || joins_running_job(); }
  // Elastic mode: a node beyond the first --nnodes joins the running job (docs/launch.md).
  bool joins_running_job() const { return node_rank >= nnodes; }
  // WORLD_SIZE of this node's ranks: the job's, or for a node beyond --nnodes the ranks up to
  // and including its own, so that RANK < WORLD_SIZE still holds (elastic mode reads them as a
  // launch slot, not as the rank in the job).
  int launch_world_size() const {
    return nproc_per_node * (node_rank >= nnodes ? node_rank + 1 : nnodes);
  }
  bool elastic() const { return min_ranks > 0; }
  bool on_etcd() const { return rdzv_backend == "etcd"; }
  // What the job's store is, for messages: "node 0's store" or "the etcd cluster (<endpoints>)".
  std::string store_name() const;
  bool is_expendable(int rank) const;
  // A rank that exited with `exit_code` would fail the same way again (no_restart_exit_codes).
  bool never_restarts(int exit_code) const;
  Milliseconds rdzv_timeout() const;
  Milliseconds stop_timeout() const;
  Milliseconds stopped_timeout() const;
  Milliseconds node_timeout() const;
};

// Declares the options on `app`; the first positional argument and everything after it is
// the command (so the program's own options are never read as cohortrun's).
void add_launch_options(CLI::App& app, LaunchOptions& options);

// Checks what CLI11 cannot: ranges that depend on each other, and that the program exists.
// Resolves the program through PATH. Throws ConfigError saying what to change.
void finish_launch_options(CLI::App& app, LaunchOptions& options);

}  // namespace cohort::run
