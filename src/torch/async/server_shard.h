// What one parameter server holds: its parameters, its optimizer, and the consistency rule
// that decides when a gradient is applied and when a client may go on (Note [Consistency]).
// Thread-safe: the server's sessions (one thread per client) call it concurrently.
//
// Note [Consistency]
// The server's version is the number of optimizer steps it applied. A client's gradient is
// tagged with the version it was computed on and with its clock (how many gradients the client
// pushed before it). Staleness = the version when the gradient is applied - its computed_on.
//  - asynchronous: each gradient is applied when it arrives, alone, scaled by 1 / (clients
//    alive), so that N gradients move the parameters as far as one synchronous step of their
//    average; a client never waits.
//  - bounded staleness s > 0 (stale-synchronous parallel): step k averages every live client's
//    gradient of clock k, in client order (clocks count from the version the server started
//    from, which a restored checkpoint sets). A client about to compute its gradient of clock c
//    waits until version >= c - s, so that gradient is at most s steps stale when step c
//    applies it. A client that runs ahead blocks; the bound is never exceeded.
//  - synchronous (s = 0) with b backup workers: step v averages the first (alive - b)
//    gradients computed on version v, in client order; one computed on an older version comes
//    too late and is dropped. A client that pushed a gradient of version v waits for version
//    v + 1, so it never computes twice on the same parameters. With b = 0 this is the rule
//    above with s = 0, and the result is DistributedDataParallel's.
// A client that leaves (done or dead) is no longer waited for; what it pushed before still
// counts.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cohort/comm/timeline.h"
#include "cohort/torch/async/parameter_server.h"

namespace cohort::ps {

struct ConsistencyRule {
  Consistency mode = Consistency::kBoundedStaleness;
  int staleness = 0;
  int backup_workers = 0;
  bool lr_scaling = false;
};

class ServerShard {
 public:
  // `client_ranks`: the group rank of each client, for messages and stats.
  ServerShard(std::vector<torch::Tensor> parameters,
              std::unique_ptr<torch::optim::Optimizer> optimizer, ConsistencyRule rule,
              std::vector<int> client_ranks, std::shared_ptr<Timeline> timeline);

  // The shard's elements, all of one dtype (a payload is this many elements).
  int64_t numel() const { return numel_; }
  torch::ScalarType dtype() const { return dtype_; }

  // Client `client` pushed `flat` (numel() elements), its gradient of `clock` computed on
  // parameters of version `computed_on`, the mean of `weight` workers' gradients (hybrid: the
  // workers of its node). Applies every step that became complete.
  void add_gradient(int client, int64_t computed_on, int64_t clock, int64_t weight,
                    const torch::Tensor& flat);
  // Waits until `client` may compute its next gradient (Note [Consistency]), then copies the
  // parameters into `out` and returns their version. TimeoutError at `deadline`, naming the
  // clients that hold the step up.
  int64_t parameters_for(int client, torch::Tensor& out, Deadline deadline);
  // The current parameters, whatever the rule (the first pull).
  int64_t current_parameters(torch::Tensor& out);
  // Waits until every client has left, then copies the final parameters. The clients still
  // training may take longer than one exchange's deadline: the wait fails only when nothing
  // happened (no push, no client leaving) for `quiet`.
  int64_t final_parameters(torch::Tensor& out, Milliseconds quiet);
  // The client is done (died: its connection failed). Steps that waited only for it go on.
  void leave(int client, bool died);
  int clients_alive() const;
  // The server failed: every wait above throws Error now instead of waiting for its deadline.
  void stop();

  ServerStats stats() const;

  // Server checkpoints (ParameterServerOptions::checkpoint): the parameters, the optimizer's
  // state and the version. save_every > 0 saves after every save_every-th step.
  void save_to(const std::string& path, int64_t save_every);
  // Restores a file written by save, when the same job wrote it or `any_job` (Note [Job
  // identity] in checkpoint.cc); the steps go on from its version. Whether it loaded. Another
  // job's file: CheckpointError unless `start_afresh` (then false).
  bool load(const std::string& path, bool any_job, bool start_afresh);

 private:
  struct Contribution {
    int client;
    int64_t computed_on;
    int64_t weight;
    torch::Tensor flat;
  };
  struct ClientState {
    bool alive = true;
    bool died = false;
    int64_t pushes = 0;
    int64_t last_computed_on = -1;  // of its last push; -1 before the first
    int64_t weight = 1;             // workers its pushes average
    Clock::time_point first_push{}, last_push{};
  };

  bool may_go_on(int client) const;
  void apply_ready_steps();
  bool step_ready(const std::vector<Contribution>& step) const;
  void apply(std::vector<Contribution> contributions);
  double scale_for_staleness(int64_t staleness) const;
  void copy_parameters(torch::Tensor& out) const;
  std::string holding_up(int client) const;
  int alive_locked() const;
  int64_t alive_weight_locked() const;
  void save_locked() const;

  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  const ConsistencyRule rule_;
  const std::vector<int> client_ranks_;
  std::shared_ptr<Timeline> timeline_;
  int64_t numel_ = 0;
  torch::ScalarType dtype_ = torch::kFloat32;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int64_t version_ = 0;
  // The version the server (re)started from: a client's clocks count from it (Note
  // [Consistency]).
  int64_t base_version_ = 0;
  std::string checkpoint_path_;
  int64_t checkpoint_every_ = 0;
  std::map<int64_t, std::vector<Contribution>> pending_;  // by clock, or by computed_on (s = 0)
  std::vector<ClientState> clients_;
  std::vector<int64_t> staleness_counts_;
  int64_t applied_ = 0;
  int64_t dropped_ = 0;
  bool stopped_ = false;
  int64_t events_ = 0;  // pushes and departures: progress, for final_parameters
};

}  // namespace cohort::ps
