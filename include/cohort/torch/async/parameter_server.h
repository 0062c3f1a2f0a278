// Asynchronous data parallelism: a parameter server with bounded staleness (docs/async.md).
//
// The last `num_servers` ranks of a group serve the model's parameters, split between them by
// size; the other ranks are workers. A worker trains its copy of the model on its own data,
// pushes its gradients to the servers, and pulls the parameters they hold; each server applies
// any torch::optim optimizer to its parameters as gradients arrive. How far a worker may run
// ahead of the others is the consistency mode:
//
//   kSynchronous       every step averages one gradient of every worker, all computed on the
//                      same parameters: the same parameters as DistributedDataParallel.
//                      backup_workers = b lets a step go on with the first N - b gradients.
//   kBoundedStaleness  stale-synchronous parallel: a worker computes its k-th gradient on
//                      parameters that include at least the steps 0..k-s-1 (it waits if the
//                      servers are not that far yet); step k averages every worker's k-th
//                      gradient. s = 0 is kSynchronous.
//   kAsynchronous      every gradient is applied when it arrives, as a step of its own scaled
//                      by 1/N; a worker never waits for the others.
//
//   auto ps = cohort::ParameterServer::create(group, model, make_optimizer,
//                                             {.consistency =
//                                             cohort::Consistency::kBoundedStaleness,
//                                              .staleness = 4});
//   if (ps->is_server()) { ps->serve(); return; }   // until every worker has finished
//   for (auto& batch : loader) {
//     model->zero_grad();
//     loss(model->forward(batch.data), batch.target).backward();
//     ps->push();                  // sends the gradients, asks for parameters; returns at once
//     ...                          // loss.item(), logging, the next batch
//     ps->wait_for_parameters();   // the newest parameters the bound allows, into the model
//   }
//   ps->finish();                  // every worker ends with the servers' final parameters
//
// Every rank runs the same program: servers build the model too (its parameters are the
// servers' initial values; a model that differs between ranks is refused, naming the first
// parameter that differs), and a server's optimizer is make_optimizer(its parameters).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/group.h"
#include "cohort/comm/timeline.h"

namespace cohort {

enum class Consistency { kSynchronous, kBoundedStaleness, kAsynchronous };

// "sync", "ssp", "async"; parse_consistency takes those and throws InvalidArgument otherwise.
const char* consistency_name(Consistency consistency);
Consistency parse_consistency(const std::string& name);

struct ParameterServerOptions {
  // The last num_servers ranks of the group serve; at least one worker must remain.
  int num_servers = 1;
  Consistency consistency = Consistency::kBoundedStaleness;
  // kBoundedStaleness: s, how many steps a gradient's parameters may be behind (>= 0).
  int staleness = 0;
  // kSynchronous (or s = 0) only: a step is applied once N - b workers' gradients for it are
  // in; a gradient that comes later is dropped (counted in ServerStats::dropped) and its
  // worker goes on from the newest parameters. 0 <= b < N.
  int backup_workers = 0;
  // Each gradient is multiplied by 1 / max(1, staleness) before it is applied: for SGD (with
  // or without momentum) the learning rate divided by the staleness (Zhang et al., 2016).
  bool staleness_lr_scaling = false;
  // Hybrid: the workers of one node average their gradients with an allreduce, and one of
  // them (the node's lowest rank) pushes the average and shares what it pulls: the servers see
  // one worker per node. Nodes as the group found them (Group::node_rank).
  bool hybrid = false;
  // Deadline of every exchange with a server or a worker, and of a wait for the staleness
  // bound. 0: the group's timeout.
  Milliseconds timeout{0};
  // Server checkpoints: when not empty, server i saves its parameters, its optimizer's state
  // and its version to "<checkpoint>.server<i>" every checkpoint_every steps (written to a
  // temporary file and renamed, so a crash leaves the previous one), and loads that file when
  // it exists at create(): a job restarted after a crash (cohortrun --max-restarts) goes on
  // from there. As for every checkpoint (docs/checkpoints.md, "Job identity"), only a file of
  // this job is loaded, unless resume_any_job; the file must come from the same model and
  // optimizer (else InvalidArgument). Another job's file is never replaced unasked: create()
  // throws CheckpointError on the server (its workers hear that it failed to start), unless
  // start_afresh, which starts from the model and lets the first save replace the file.
  std::string checkpoint;
  int64_t checkpoint_every = 100;
  bool resume_any_job = false;
  bool start_afresh = false;
  // When set: workers record "push" and "wait for parameters", servers "apply step k"
  // (docs/timeline.md).
  std::shared_ptr<Timeline> timeline;
};

// What a server did, for logs, metrics and tests.
struct ServerStats {
  int64_t version = 0;  // optimizer steps applied
  // staleness_counts[t]: gradients applied t steps after the parameters they were computed on.
  std::vector<int64_t> staleness_counts;
  int64_t applied = 0;            // gradients applied
  int64_t dropped = 0;            // late gradients of backup workers
  std::vector<int> dead_workers;  // ranks whose connection died before they finished
  // The ranks that push to the servers (the workers; with hybrid, each node's lowest worker),
  // and for each the mean time between its pushes in milliseconds (0: fewer than two pushes):
  // names a straggler.
  std::vector<int> client_ranks;
  std::vector<double> mean_push_interval_ms;
  // The rank whose pushes are furthest apart, and how many times the median interval that is
  // (-1, 0 when not known).
  int slowest_worker = -1;
  double slowest_ratio = 0;
};

// The parameters of a model in the order servers get them: parameter i goes to server
// assign_to_servers(numels, S)[i]. Largest first onto the server holding the fewest elements
// so far (ties: the lower server), so every server's share is within one tensor of the others.
std::vector<int> assign_to_servers(const std::vector<int64_t>& numels, int num_servers);

class ParameterServer {
 public:
  using MakeOptimizer =
      std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

  // Collective over `group`: checks that every rank has the same model, connects every worker
  // to every server, and gives workers the servers' initial parameters. Throws
  // InvalidArgument for options that do not fit the group, naming the option.
  static std::unique_ptr<ParameterServer> create(std::shared_ptr<Group> group,
                                                 torch::nn::Module& model,
                                                 MakeOptimizer make_optimizer,
                                                 ParameterServerOptions options = {});
  virtual ~ParameterServer() = default;

  bool is_server() const { return server_index() >= 0; }
  // This rank's index among the servers (-1 on a worker) and among the workers (-1 on a
  // server).
  virtual int server_index() const = 0;
  virtual int worker_index() const = 0;
  // The group ranks of the servers, of the workers, and of the workers that push to the
  // servers (every worker; with hybrid, each node's lowest).
  virtual std::vector<int> server_ranks() const = 0;
  virtual std::vector<int> worker_ranks() const = 0;
  virtual std::vector<int> client_ranks() const = 0;
  // Which server holds each of the model's parameters (model.parameters() order).
  virtual const std::vector<int>& server_of_parameter() const = 0;

  // ---- servers
  // Serves until every worker has finished or died; then returns. A worker that dies is
  // logged and dropped (the others go on); throws PeerError when every worker died.
  virtual void serve() = 0;
  virtual ServerStats stats() const = 0;

  // ---- workers
  // Sends this worker's gradients (the model's .grad; an undefined one counts as zeros) to the
  // servers and asks them for parameters. Returns once the gradients are copied.
  virtual void push() = 0;
  // Waits for the parameters asked for by the last push (the newest the consistency mode
  // allows) and copies them into the model. Throws PeerError naming a server that died.
  virtual void wait_for_parameters() = 0;
  // push() then wait_for_parameters().
  void step() {
    push();
    wait_for_parameters();
  }
  // Tells the servers this worker is done; returns with the final parameters in the model,
  // once every worker has finished (however long the others train: it fails only when none of
  // them pushed or finished for `timeout`, or a server died). Call it once, after the last
  // step.
  virtual void finish() = 0;
  // The version (optimizer steps applied) of the parameters now in the model: the lowest over
  // the servers.
  virtual int64_t parameter_version() const = 0;
};

}  // namespace cohort
