// The machinery behind cohort::Group: an ordered queue of operations run by one worker thread
// (or inline by a blocking caller when nothing is queued), failure bookkeeping, and the
// stall reports that let a timeout name the ranks that never joined (Note [Stall reports]).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "algorithms/context.h"
#include "backends/collective_engine.h"
#include "backends/native_backend.h"
#include "backends/staging_backend.h"
#include "choice/algorithm_choice.h"
#include "choice/cost_model.h"
#include "cohort/comm/group.h"
#include "group/stall_report.h"
#include "group/topology.h"
#include "transport/shm/shm_window.h"

namespace cohort {

// What a rank believes it is calling; compared across ranks by COHORT_DEBUG=detail.
struct Signature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  size_t count = 0;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int peer = -1;  // send/recv only
  CallSite site = CallSite::kUser;

  std::string describe() const;
  // What this rank's messages of the call carry (call_stamp.h).
  CallStamp stamp() const;
};

struct Operation {
  Signature signature;
  bool collective = true;
  uint64_t sequence = 0;  // collectives: the group's sequence number at issue time
  uint64_t channel = 0;   // send/recv: kP2PChannelBit | user tag
  Milliseconds timeout{0};
  std::function<void(algo::Context&)> body;
  std::shared_ptr<Work> work;

  std::string describe() const;
};

class Group::Impl {
 public:
  // `store` may be null only for a group whose engine carries its own bookkeeping (MPI):
  // then attach the engine and call discover_topology_through_engine() before any call.
  Impl(std::shared_ptr<Transport> transport, std::shared_ptr<Store> store, GroupOptions options);
  ~Impl();

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  const GroupOptions& options() const { return options_; }
  Transport& transport() { return *transport_; }
  const std::shared_ptr<Transport>& shared_transport() const { return transport_; }
  const std::shared_ptr<Store>& store() const { return store_; }
  // The backend engine beside the transport (MPI, NCCL), or null (Note [Backends]).
  CollectiveEngine* engine() const { return engine_.get(); }
  // Once, before the group is handed out (its own set-up calls may come before: NCCL's id
  // travels through the group's host collectives).
  void attach_engine(std::shared_ptr<CollectiveEngine> engine);
  // Once, before the group is handed out: device buffers are staged through host memory and
  // run by cohort's algorithms (Note [Staged device buffers]; create_cuda_staged_group).
  void attach_staging(std::shared_ptr<DeviceStaging> staging);
  // Whether the group takes device buffers: on an engine of device memory, or staged.
  bool takes_device_buffers() const;

  // The subgroup of `members` (ranks of this group, in the subgroup's rank order), called by
  // them only: its transport split from this one's, its store a prefix of this one's, this
  // group's topology restricted to it, and its engine made by `engine` when given, else from
  // this group's engine (Group::split, create_nccl_group). `key` must be the same on the
  // members and unique per subgroup.
  using EngineMaker = std::function<std::shared_ptr<CollectiveEngine>(HostCollectives& subgroup)>;
  std::shared_ptr<Group> make_subgroup(const std::vector<int>& members, const std::string& key,
                                       GroupOptions options, Deadline deadline,
                                       const EngineMaker& engine = {});

  // Numbers the operation (issue order) and queues it for the worker.
  std::shared_ptr<Work> submit(Operation op);
  // As submit, then waits; runs on the calling thread when nothing else is queued.
  void run_blocking(Operation op);
  // Queues a send or recv; `body` gets the message's index in its (peer, tag) stream.
  using P2PBody = std::function<void(algo::Context&, uint64_t)>;
  std::shared_ptr<Work> submit_p2p(CollectiveKind kind, size_t count, DType dtype, int peer,
                                   const CollectiveOptions& opts, P2PBody body);
  // As submit_p2p, then waits; runs on the calling thread when nothing else is queued.
  void run_p2p_blocking(CollectiveKind kind, size_t count, DType dtype, int peer,
                        const CollectiveOptions& opts, P2PBody body);

  Milliseconds timeout_for(const CollectiveOptions& opts) const;
  // The algorithm a collective of `bytes` runs with (algorithm_choice.h).
  Algorithm algorithm_for(CollectiveKind kind, size_t bytes, const CollectiveOptions& opts) const;
  // The operation that runs `call` (group/dispatch.cc): its backend and algorithm chosen here,
  // on the caller's thread: kEngine only where the engine has the call's dtype, op and count,
  // else cohort's own choice over the same transport. Throws InvalidArgument for buffers the
  // chosen backend cannot take.
  Operation collective_operation(const CollectiveCall& call, const CollectiveOptions& opts) const;
  // Queues Group::send or recv (`call`: kSend's `in`, kRecv's `out`), or with `blocking` runs
  // it as run_p2p_blocking does and returns null.
  std::shared_ptr<Work> point_to_point(const CollectiveCall& call, int peer,
                                       const CollectiveOptions& opts, bool blocking = false);
  // Hierarchical allreduce of `bytes`: the flat algorithm of its phase across nodes.
  Algorithm algorithm_across_nodes(size_t bytes) const {
    return cheapest_across_nodes(bytes, shape(), cost_model_);
  }
  void abort(std::exception_ptr error) noexcept;
  uint64_t sequence_number() const;

  const Topology& topology() const { return topology_; }
  const CostModel& cost_model() const { return cost_model_; }
  // Collective (Group::create): learns which ranks share a host, agrees on rank 0's cost model,
  // and opens a shared memory window among the ranks of each node.
  void discover_topology();
  // Collective (Group::create_inproc): every rank a thread of this process, rank 0's cost model.
  void share_one_process();
  // Collective, for a group without a store (the MPI backend): the engine says which ranks
  // share a host, and rank 0's cost model is broadcast through it.
  void discover_topology_through_engine();
  // Collective over a subgroup of `parent` (`members`: their ranks there, in this group's
  // order): its members' part of the parent's topology and hosts, the parent's cost model, and
  // a shared memory window among the members of each node that can share one.
  void inherit(const Impl& parent, const std::vector<int>& members, Deadline deadline);
  void report_creation();  // at COHORT_LOG_LEVEL=info (group_report.h)

 private:
  struct Dispatch {
    CollectiveBackend* backend;
    Plan plan;
  };
  Dispatch dispatch(const CollectiveCall& call, const CollectiveOptions& opts) const;
  // Whether `call` runs on an engine of device memory (NCCL): its buffers are on a device, or
  // it is a barrier of a group whose engine has no host collectives.
  bool on_device_engine(const CollectiveCall& call) const;
  void check_device(const CollectiveCall& call, const CollectiveBackend& backend) const;
  void note_engine_fallback(const CollectiveCall& call, Algorithm algorithm) const;
  void enqueue_locked(Operation op);  // starts the worker if needed (Note [Worker on demand])
  // Runs `op` on this thread; `lock` holds mutex_, nothing is queued and nothing runs.
  void run_inline(Operation& op, std::unique_lock<std::mutex>& lock);
  Operation p2p_operation(CollectiveKind kind, size_t count, DType dtype, int peer,
                          const CollectiveOptions& opts) const;
  // Under mutex_: gives `op` its index in its (peer, tag) stream and its body.
  void number_p2p_locked(Operation& op, P2PBody body);
  void worker_loop();
  void execute(Operation& op) noexcept;  // run, then complete op.work
  std::exception_ptr run(Operation& op) noexcept;
  std::exception_ptr explain_failure(const Operation& op, std::exception_ptr error);
  void check_signatures(const Operation& op, Deadline deadline);
  // Note [Call stamps]: an engine of host memory (MPI) matches messages itself, so the group
  // compares the ranks' calls through it before each collective. Not for NCCL: its collectives
  // run on the device stream, which a host check would have to wait for.
  bool checks_calls_through_engine() const {
    return engine_ != nullptr && engine_->handles_host_memory();
  }
  void check_call_through_engine(uint64_t sequence, const CallStamp& stamp, Deadline deadline);
  // Every rank's signature of `op`, in rank order, through the store or else the engine.
  std::vector<std::string> gather_signatures(const Operation& op, Deadline deadline);
  // Rank 0's `text` on every rank, through the store (under `key`) or else the engine.
  std::string share_from_rank0(const std::string& text, const std::string& key, Deadline deadline);
  void agree_on_cost_model(Deadline deadline);
  // Collective over the group's store: a window among the ranks of each node that can share one.
  void open_shared_memory(Deadline deadline);
  GroupShape shape() const;
  // After anything that algorithm_for's choice depends on changes (Note [Remembered choices]).
  void forget_choices();

  std::shared_ptr<Transport> transport_;
  std::shared_ptr<CollectiveEngine> engine_;  // may be transport_ itself (MPI)
  std::shared_ptr<Store> store_;
  GroupOptions options_;
  Topology topology_;
  CostModel cost_model_ = CostModel::defaults();
  std::vector<HostInfo> hosts_;     // every rank's host, by rank; empty where none were exchanged
  std::unique_ptr<ShmWindow> shm_;  // this rank's node's window, when it has several ranks
  bool shared_memory_everywhere_ = false;    // every node with several ranks has a window
  std::vector<uint8_t> scratch_;             // used only by the thread running an operation
  mutable NativeBackend native_;             // cohort's algorithms over transport_
  std::unique_ptr<StagingBackend> staging_;  // device buffers through host memory, or null
  mutable std::array<std::atomic<uint64_t>, 64> choices_{};  // Note [Remembered choices]

  mutable std::mutex mutex_;  // guards the queue, counters and failure state
  std::condition_variable queue_cv_;
  std::deque<Operation> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  uint64_t next_sequence_ = 0;
  std::map<std::pair<int, uint64_t>, uint64_t> p2p_send_index_;  // (peer, channel) -> next
  std::map<std::pair<int, uint64_t>, uint64_t> p2p_recv_index_;
  std::exception_ptr failure_;
  mutable std::set<std::pair<CollectiveKind, DType>> engine_fallbacks_noted_;

  // Null without a store (the MPI backend): then a timeout cannot name the ranks behind.
  std::unique_ptr<StallReporter> stalls_;
  std::thread worker_;  // started by the first queued operation (Note [Worker on demand])
};

}  // namespace cohort
