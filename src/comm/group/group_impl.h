// The machinery behind cohort::Group, in three parts that each do one thing:
//  - the set-up (group_setup.h): once, when the group is made, which ranks share a host, the
//    cost model and the shared memory window; it hands them to the other two;
//  - the dispatcher (dispatcher.h): for each call, its backend and algorithm;
//  - the scheduler (scheduler.h): the queue, the worker, the sequence numbers and the failure.
// Group::Impl holds them together with the transport and the store, runs one operation when the
// scheduler asks (the checks, the stall reports that let a timeout name the ranks that never
// joined: Note [Stall reports]) and aborts the group.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "backends/collective_engine.h"
#include "cohort/comm/group.h"
#include "group/dispatcher.h"
#include "group/group_setup.h"
#include "group/operation.h"
#include "group/scheduler.h"
#include "group/stall_report.h"

namespace cohort {

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
  CollectiveEngine* engine() const { return dispatcher_.engine(); }
  void attach_engine(std::shared_ptr<CollectiveEngine> engine) {
    dispatcher_.attach_engine(std::move(engine));
  }
  void attach_staging(std::shared_ptr<DeviceStaging> staging) {
    dispatcher_.attach_staging(std::move(staging));
  }
  bool takes_device_buffers() const { return dispatcher_.takes_device_buffers(); }

  // The subgroup of `members` (ranks of this group, in the subgroup's rank order), called by
  // them only: its transport split from this one's, its store a prefix of this one's, this
  // group's topology restricted to it, and its engine made by `engine` when given, else from
  // this group's engine (Group::split, create_nccl_group). `key` must be the same on the
  // members and unique per subgroup.
  using EngineMaker = std::function<std::shared_ptr<CollectiveEngine>(HostCollectives& subgroup)>;
  std::shared_ptr<Group> make_subgroup(const std::vector<int>& members, const std::string& key,
                                       GroupOptions options, Deadline deadline,
                                       const EngineMaker& engine = {});

  // The scheduler's (scheduler.h).
  std::shared_ptr<Work> submit(Operation op) { return scheduler_.submit(std::move(op)); }
  void run_blocking(Operation op) { scheduler_.run_blocking(std::move(op)); }
  uint64_t sequence_number() const { return scheduler_.sequence_number(); }
  std::exception_ptr failure() const { return scheduler_.failure(); }
  // Queues Group::send or recv (`call`: kSend's `in`, kRecv's `out`), or with `blocking` runs
  // it on this thread when nothing is queued, and returns null.
  std::shared_ptr<Work> point_to_point(const CollectiveCall& call, int peer,
                                       const CollectiveOptions& opts, bool blocking = false);

  // The dispatcher's (dispatcher.h).
  Milliseconds timeout_for(const CollectiveOptions& opts) const {
    return dispatcher_.timeout_for(opts);
  }
  Algorithm algorithm_for(CollectiveKind kind, size_t bytes, const CollectiveOptions& opts) const {
    return dispatcher_.algorithm_for(kind, bytes, opts);
  }
  Operation collective_operation(const CollectiveCall& call, const CollectiveOptions& opts) const {
    return dispatcher_.collective_operation(call, opts);
  }

  void abort(std::exception_ptr error) noexcept;

  const Topology& topology() const { return layout_.topology; }
  const CostModel& cost_model() const { return layout_.cost_model; }
  // The set-up (group_setup.h), each collective: Group::create, the MPI backend,
  // Group::create_inproc, and a subgroup of `parent`.
  void discover_topology();
  void discover_topology_through_engine();
  void share_one_process();
  void inherit(const Impl& parent, const std::vector<int>& members, Deadline deadline);
  void report_creation();  // at COHORT_LOG_LEVEL=info (group_report.h)

 private:
  GroupSetup setup() const;
  // Keeps what the set-up learnt and hands the choice its part.
  void install(GroupLayout layout);
  // The scheduler's executor: runs `op` to its end on this thread.
  std::exception_ptr run(Operation& op) noexcept;
  std::exception_ptr explain_failure(const Operation& op, std::exception_ptr error);
  void check_signatures(const Operation& op, Deadline deadline);
  // Note [Call stamps]: an engine of host memory (MPI) matches messages itself, so the group
  // compares the ranks' calls through it before each collective. Not for NCCL: its collectives
  // run on the device stream, which a host check would have to wait for.
  bool checks_calls_through_engine() const {
    return engine() != nullptr && engine()->handles_host_memory();
  }
  void check_call_through_engine(uint64_t sequence, const CallStamp& stamp, Deadline deadline);
  // Every rank's signature of `op`, in rank order, through the store or else the engine.
  std::vector<std::string> gather_signatures(const Operation& op, Deadline deadline);

  std::shared_ptr<Transport> transport_;
  std::shared_ptr<Store> store_;
  GroupOptions options_;
  GroupLayout layout_;
  std::vector<uint8_t> scratch_;  // used only by the thread running an operation
  // Null without a store (the MPI backend): then a timeout cannot name the ranks behind.
  std::unique_ptr<StallReporter> stalls_;
  Dispatcher dispatcher_;
  // Last, so that it is destroyed first: its worker runs operations that use the rest.
  Scheduler scheduler_;
};

}  // namespace cohort
