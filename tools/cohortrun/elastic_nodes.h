// Elastic mode on several nodes (--min-ranks with --nnodes > 1; docs/launch.md, "Elastic
// mode"): what one node's cohortrun knows of the other nodes through the job's store (node 0's
// or etcd), and how
// the job ends. The ranks themselves agree on their membership through ElasticGroup; cohortrun
// only watches, reports and keeps node 0's TCP store up long enough.
//
// Note [Elastic nodes]
// Keys, under "cohortrun/elastic/": beat/<r> (a counter node r's cohortrun bumps while it
// lives), joiners (a counter) and joiner/<i> ("<node rank> <ranks> <host>": the i-th node that
// joined the running job beyond --nnodes), done/<r> (node r's slots have all ended: how many
// of them succeeded) and left/<r> (node r's cohortrun is exiting).
//
// Nodes 0 to --nnodes - 1 are known from the start (the rendezvous waited for each of them),
// later ones from joiner/<i>. Each cohortrun bumps its beat and reads the others' every
// watch interval; a node whose beat has not moved for --node-timeout (by this node's clock)
// and that has not left is lost: its cohortrun was killed or its host is gone (its ranks die
// with their cohortrun, and the other ranks' ElasticGroup forms a smaller generation without
// them). No node stops because another is lost; a lost node heard from again is live again.
//
// The end: a node whose slots all succeeded reports done and leaves at once; one with slots
// given up waits until every live node is done (it succeeds when at least --min-ranks ranks of
// the job did). On TCP node 0 hosts the store, so it waits until every live node has left, at
// most --rdzv-timeout after they are all done, and it is the job's single point of failure:
// when its store is lost, every other node stops its ranks and fails. With --rdzv-backend etcd
// the keys are in etcd, node 0 is lost like any other node, and only etcd's quorum lost (a
// StoreError naming etcd) stops every node.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cohort/comm/elastic.h"
#include "cohort/comm/store.h"
#include "elastic_slots.h"
#include "launch_options.h"

namespace cohort::run {

class ElasticNodes : public JobWatch {
 public:
  // `store`: node 0's or etcd's (NodeRendezvous::store()); it must outlive this.
  ElasticNodes(const LaunchOptions& options, Store& store);

  // A node beyond --nnodes: waits (up to --rdzv-timeout) until the job's first generation has
  // formed, so that its ranks join the running job at a step boundary instead of the first
  // generation's count, then registers. Throws Error when the job has finished (nothing to
  // join) or did not start in time; Interrupted on a stop signal.
  void join_running_job();

  // JobWatch: beats, reads the others' beats and the new nodes, prints what changed.
  void watch() override;
  void watch_now() override;
  bool job_finished() const override { return status_.finished; }
  std::string store_lost() const override { return store_lost_; }

  // After this node's slots have ended with `succeeded` of them succeeded: says so in the
  // store. With `wait_for_others`, waits until every live node is done and returns how many
  // ranks of the job succeeded; otherwise returns nothing. Interrupted on a stop signal.
  std::optional<int> report_done(int succeeded, bool wait_for_others);

  // This node's cohortrun exits: says so; node 0 of a TCP store then waits until every other
  // live node has left (their last look at its store), at most --rdzv-timeout.
  void leave();

 private:
  struct Node {
    int ranks = 0;
    std::string host;
    int64_t beat = -1;
    std::chrono::steady_clock::time_point heard;
    uint64_t generation_when_heard = 0;
    bool lost = false;
    bool left = false;
    std::optional<int> done;  // how many of its ranks succeeded
  };

  void look();
  void read_new_joiners();
  void read_joiners(int64_t count, bool news);
  void check_beats();
  void check_generation();
  bool has_key(const std::string& key);
  std::optional<int> done_of(int node);
  std::string key(const std::string& name) const;
  std::string beat_key(int node) const;
  // Waits until `ready` holds for every other live node, watching meanwhile.
  template <typename Ready>
  bool wait_for_nodes(Ready ready, Deadline deadline);

  const LaunchOptions& options_;
  Store& store_;
  std::shared_ptr<Store> job_store_;  // the ranks' view: node 0's store under attempt0/
  std::map<int, Node> others_;        // by node rank
  int64_t joiners_seen_ = 0;
  ElasticJobStatus status_;
  std::string store_lost_;
  Deadline next_watch_ = Deadline::after(Milliseconds(0));
};

}  // namespace cohort::run
