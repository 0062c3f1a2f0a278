// Where a group's calls get their backend and algorithm (Note [Backends]): cohort's own
// algorithms, the engine beside the transport, or the staging of device buffers; the cost
// model and the group's shape that the automatic choice weighs, and the choices it remembers.
// Once per call, on the caller's thread, before the call is queued (docs/architecture.md, "The
// life of one allreduce").
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "backends/collective_engine.h"
#include "backends/native_backend.h"
#include "backends/staging_backend.h"
#include "choice/algorithm_choice.h"
#include "cohort/comm/cost_model.h"
#include "cohort/comm/group.h"
#include "group/operation.h"
#include "group/scheduler.h"
#include "topology/topology.h"

namespace cohort {

class Dispatcher {
 public:
  // `transport_name` names the transport in logs; `options` gives the defaults (algorithm,
  // timeout) that a call's options override.
  Dispatcher(int size, std::string transport_name, const GroupOptions& options);

  // Once, before the group is handed out (its own set-up calls may come before: NCCL's id
  // travels through the group's host collectives).
  void attach_engine(std::shared_ptr<CollectiveEngine> engine);
  // Once, before the group is handed out: device buffers are staged through host memory and
  // run by cohort's algorithms (Note [Staged device buffers]; create_cuda_staged_group).
  void attach_staging(std::shared_ptr<DeviceStaging> staging);
  // The backend engine beside the transport (MPI, NCCL), or null.
  CollectiveEngine* engine() const { return engine_.get(); }
  const std::shared_ptr<CollectiveEngine>& shared_engine() const { return engine_; }
  StagingBackend* staging() const { return staging_.get(); }
  // Whether the group takes device buffers: on an engine of device memory, or staged.
  bool takes_device_buffers() const;

  // What the group's set-up learnt (group_setup.h): the choice weighs them from now on.
  void set_layout(const Topology& topology, bool shared_memory_everywhere,
                  const CostModel& cost_model);
  const CostModel& cost_model() const { return cost_model_; }
  GroupShape shape() const;

  Milliseconds timeout_for(const CollectiveOptions& opts) const;
  // The algorithm a collective of `bytes` runs with (algorithm_choice.h).
  Algorithm algorithm_for(CollectiveKind kind, size_t bytes, const CollectiveOptions& opts) const;
  // Hierarchical allreduce of `bytes`: the flat algorithm of its phase across nodes.
  Algorithm algorithm_across_nodes(size_t bytes) const {
    return cheapest_across_nodes(bytes, shape(), cost_model_);
  }
  // The operation that runs `call`: kEngine only where the engine has the call's dtype, op and
  // count, else cohort's own choice over the same transport. Throws InvalidArgument for
  // buffers the chosen backend cannot take.
  Operation collective_operation(const CollectiveCall& call, const CollectiveOptions& opts) const;
  // The body of Group::send or recv (`call`: kSend's `in`, kRecv's `out`): host buffers over
  // the transport, device buffers on the engine (NCCL) or staged.
  Scheduler::P2PBody point_to_point_body(const CollectiveCall& call, int peer) const;

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
  // After anything that algorithm_for's choice depends on changes (Note [Remembered choices]).
  void forget_choices();

  const int size_;
  const std::string transport_name_;
  const Algorithm default_algorithm_;
  const Milliseconds default_timeout_;
  std::shared_ptr<CollectiveEngine> engine_;  // may be the transport itself (MPI)
  mutable NativeBackend native_;              // cohort's algorithms over the transport
  std::unique_ptr<StagingBackend> staging_;   // device buffers through host memory, or null
  // The layout (set_layout).
  int nodes_ = 1;
  int local_size_ = 1;
  bool shared_memory_everywhere_ = false;
  CostModel cost_model_ = CostModel::defaults();
  mutable std::array<std::atomic<uint64_t>, 64> choices_{};  // Note [Remembered choices]
  mutable std::mutex fallbacks_mutex_;
  mutable std::set<std::pair<CollectiveKind, DType>> engine_fallbacks_noted_;
};

}  // namespace cohort
