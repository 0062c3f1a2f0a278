// How the cohortrun processes of a job (one per node) find each other and agree on what
// happens: node 0 hosts the job's store at --master-addr:--master-port, which the ranks use
// too (COHORT_STORE_HOSTED), or with --rdzv-backend etcd every node uses the job's keys in etcd
// (under /cohort/<job id>/, as the ranks do), so that no node holds the store; every node joins
// each attempt there, reports its ranks' failure or success, and watches for the others' (docs/
// launch.md, "Several machines").
//
// Keys, under "cohortrun/<attempt>/": node/<r> ("<ranks per node> <host>"), claim/<r> (a
// counter that catches two nodes with one --node-rank), failed (a counter) and failure (the
// first report), done (a counter of nodes whose ranks all succeeded), left (a counter of nodes
// that saw every node done).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/tcp_store.h"
#include "cohort/core/error.h"
#include "launch_options.h"

namespace cohort::run {

class NodeRendezvous {
 public:
  // TCP: node 0 starts the store server (a port in use is a ConfigError); every node connects
  // to it, waiting up to --rdzv-timeout for node 0 (then StoreError). etcd: every node connects
  // to the cluster under job `etcd_job_id`'s prefix (StoreError naming etcd when it cannot).
  NodeRendezvous(const LaunchOptions& options, const std::string& token,
                 const std::string& etcd_job_id);

  // The TCP store's port (the ranks' MASTER_PORT); 0 on etcd.
  uint16_t port() const { return tcp_store_ != nullptr ? tcp_store_->port() : 0; }

  // The job's identity (COHORT_JOB_ID) on every node. TCP: node 0's (`mine`, else `fresh`),
  // which the others wait for (up to --rdzv-timeout); a node whose own `mine` differs from it
  // was started for another job: ConfigError naming both. etcd: the id the keys are under.
  std::string agree_on_job_id(const std::optional<std::string>& mine, const std::string& fresh);

  // Waits until every node has joined `attempt`. Throws TimeoutError naming the node ranks
  // that never arrived, ConfigError when two nodes claim one node rank or the nodes disagree
  // on --nproc-per-node, Interrupted when a stop signal arrives meanwhile.
  void join(int attempt);

  // Elastic mode, a node beyond --nnodes: claims its node rank (ConfigError when another node
  // has it) and checks that it runs as many ranks as node 0 (waiting up to --rdzv-timeout for
  // node 0's entry). It joins no attempt: the running job takes its ranks (ElasticNodes).
  void join_running_job();

  // The store on node 0 or etcd (elastic mode on several nodes keeps its own keys there).
  Store& store() { return *store_; }

  // Another node's report of a failure in `attempt`, if any. StoreError when the store is lost.
  std::optional<std::string> failure(int attempt);
  void report_failure(int attempt, const std::string& what);
  void report_done(int attempt);
  // After this node's ranks succeeded: waits until every node's have (all_done), or one
  // reports a failure (failure), or --rdzv-timeout passes (neither).
  struct Others {
    bool all_done = false;
    std::optional<std::string> failure;
  };
  Others wait_for_others(int attempt);
  // Counts this node out of `attempt`; node 0 then waits (until `deadline`) for every node to
  // have done so when it hosts the store, which must outlive every other node's last look.
  void leave(int attempt, Deadline deadline);

 private:
  std::string key(int attempt, const std::string& name) const;
  std::string node_key(int attempt, int node) const;
  void claim_node_rank(int attempt);
  std::string missing_nodes(int attempt);
  void check_same_ranks_per_node(int attempt);
  void check_ranks_of(int attempt, int node);

  // Where the nodes meet, for errors: "node 0's store at host:port" or etcd's endpoints.
  std::string where() const;

  const LaunchOptions& options_;
  std::string etcd_job_id_;
  std::unique_ptr<Store> store_;
  TcpStore* tcp_store_ = nullptr;  // store_ when it is node 0's
};

// A stop signal (SIGINT, SIGTERM, SIGHUP) arrived while cohortrun waited.
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

}  // namespace cohort::run
