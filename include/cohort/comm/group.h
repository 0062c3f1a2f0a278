// cohort::Group: a process group, the object every collective is called on.
//
//   auto store = std::make_shared<cohort::TcpStore>(...);
//   auto group = cohort::Group::create(store, rank, size);
//   group->allreduce(cohort::make_buffer(grads));            // blocking, in place
//   auto work = group->allreduce_async(cohort::make_buffer(grads));
//   work->wait();                                             // rethrows the collective's error
//
// Semantics (docs/errors.md):
//  - collectives on one group run in the order they were issued, on every rank;
//  - every collective has a deadline (CollectiveOptions::timeout, else COHORT_TIMEOUT_S,
//    default 300 s); a timeout throws TimeoutError naming the collective, its sequence number
//    and the ranks that never joined it;
//  - a dead peer makes every survivor throw PeerError naming it, within seconds;
//  - after any error the group is broken: every later call rethrows that first error.
#pragma once

#include <memory>
#include <string>

#include "cohort/comm/buffer.h"
#include "cohort/comm/options.h"
#include "cohort/comm/registered_memory.h"
#include "cohort/comm/store.h"
#include "cohort/comm/transport.h"
#include "cohort/comm/work.h"

namespace cohort {

class InprocFabric;
struct Operation;

struct GroupOptions {
  // Default deadline of every collective. 0: COHORT_TIMEOUT_S (seconds), else 300 s.
  Milliseconds timeout{0};
  // Default algorithm. kAuto: COHORT_ALGO if set, else chosen per call.
  Algorithm algorithm = Algorithm::kAuto;
  // Check before each collective that all ranks call the same one with the same count, dtype,
  // op and root. Off by default; COHORT_DEBUG=detail turns it on.
  bool debug_checks = false;
  // Every collective's messages carry its call (collective, count, dtype, op, root), and a rank
  // that receives another call than its own throws MismatchError on every rank (docs/errors.md,
  // "Collectives out of step"). Costs nothing measurable on shared memory and TCP, one small
  // allreduce per collective under MPI. false, or COHORT_CHECK_CALLS=0, turns it off.
  bool check_calls = true;
  // Keys of this group live under this prefix of the store, so several groups can share one.
  std::string name = "world";

  // TCP: the address peers use to reach this rank (COHORT_HOST; default: 127.0.0.1 when the
  // store is local, else the host name), and the secret every connection must present
  // (COHORT_JOB_TOKEN; cohortrun generates one).
  std::string host;
  std::string job_token;
  // Group::create: ranks on one host exchange data through a shared memory segment instead of
  // TCP, and groups spanning hosts can run hierarchical allreduce (COHORT_SHM=0 turns it off).
  bool shared_memory = true;
  // Group::create: names this rank's node (ranks with the same name form one node) instead of
  // the detected host (COHORT_NODE_ID). For containers that hide their host, and for tests
  // that simulate several hosts on one machine; shared memory is still only used between
  // ranks that really share one.
  std::string node_id;

  // Fills every field left at its default from the environment.
  GroupOptions resolved() const;
};

namespace detail {
struct GroupAccess;  // src/comm/group/group_access.h: the comm layer's way to Group::Impl
}  // namespace detail

class Group : public std::enable_shared_from_this<Group> {
 public:
  class Impl;

  // A group over TCP: every rank calls this with the same store and size.
  static std::shared_ptr<Group> create(std::shared_ptr<Store> store, int rank, int size,
                                       GroupOptions options = {});
  // A group whose ranks are threads of this process sharing `fabric`.
  static std::shared_ptr<Group> create_inproc(std::shared_ptr<InprocFabric> fabric, int rank,
                                              GroupOptions options = {});
  // A group over any transport, with cohort's algorithms. `store` must be shared by all ranks.
  Group(std::unique_ptr<Transport> transport, std::shared_ptr<Store> store, GroupOptions options);
  // For cohort's backends (create_mpi_group, create_nccl_group, split): a group around
  // machinery they have built.
  explicit Group(std::unique_ptr<Impl> impl);
  ~Group();
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;

  int rank() const;
  int size() const;
  const GroupOptions& options() const;

  // Topology, found when the group is made (Group::create compares host identities, or
  // COHORT_NODE_ID where set; create_inproc puts all ranks on one node; subgroups keep their
  // members' nodes; a group built directly on a transport puts each rank on a node of its
  // own). Nodes are numbered in order of their lowest rank, local ranks in rank order.
  int local_rank() const;  // index among the ranks on this rank's node
  int local_size() const;  // ranks on this rank's node
  int node_rank() const;   // index of this rank's node
  int num_nodes() const;

  // What runs this group's collectives: the engine it was made on (kMpi, kNccl), else
  // kNative (cohort's algorithms, also for a staged CUDA group). Never kAuto.
  Backend backend() const;

  // Whether collectives take CUDA device buffers (Buffer::device >= 0) with the automatic
  // algorithm: true for NCCL groups (nccl.h); every group takes host buffers.
  bool takes_device_buffers() const;

  // The algorithm a collective of `bytes` (the larger of its buffers) would run with these
  // options, the same on every rank: what opts or COHORT_ALGO ask for where the collective has
  // it and the group can run it, else the automatic choice (docs/algorithms.md).
  Algorithm algorithm_for(CollectiveKind kind, size_t bytes,
                          const CollectiveOptions& opts = {}) const;

  // ---- collectives. Each has a blocking form and an _async form returning a Work handle.
  // The buffers of an _async call must stay valid until its Work completes.

  // data on every rank becomes op(data of all ranks).
  void allreduce(Buffer data, const CollectiveOptions& opts = {});
  void allreduce(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> allreduce_async(Buffer data, const CollectiveOptions& opts = {});

  // data of opts.root is copied into data of every rank.
  void broadcast(Buffer data, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> broadcast_async(Buffer data, const CollectiveOptions& opts = {});

  // op(data of all ranks) lands in data on opts.root; other ranks' data is left unchanged.
  void reduce(Buffer data, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> reduce_async(Buffer data, const CollectiveOptions& opts = {});

  // out[size * in.count]: block r is rank r's in.
  void allgather(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> allgather_async(ConstBuffer in, Buffer out,
                                        const CollectiveOptions& opts = {});

  // in[size * out.count]: rank r gets op over all ranks of block r of in.
  void reduce_scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> reduce_scatter_async(ConstBuffer in, Buffer out,
                                             const CollectiveOptions& opts = {});

  // out[size * in.count] on opts.root gets block r from rank r (out is ignored elsewhere).
  void gather(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> gather_async(ConstBuffer in, Buffer out,
                                     const CollectiveOptions& opts = {});

  // in[size * out.count] on opts.root: rank r gets block r (in is ignored elsewhere).
  void scatter(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> scatter_async(ConstBuffer in, Buffer out,
                                      const CollectiveOptions& opts = {});

  // in and out hold size equal blocks; block j of rank r's in becomes block r of rank j's out.
  void all_to_all(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> all_to_all_async(ConstBuffer in, Buffer out,
                                         const CollectiveOptions& opts = {});

  // Every rank's in goes to its successor on the ring (rank + 1 mod size), whose out receives
  // it: rank r's out holds rank r - 1's in. in and out have the same count on every rank and
  // do not overlap. Within one host it runs through shared memory (reading a registered input
  // in place); the buddy copies of elastic sharded training use it (docs/elastic.md).
  void ring_shift(ConstBuffer in, Buffer out, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> ring_shift_async(ConstBuffer in, Buffer out,
                                         const CollectiveOptions& opts = {});

  void barrier(const CollectiveOptions& opts = {});
  std::shared_ptr<Work> barrier_async(const CollectiveOptions& opts = {});

  // Point-to-point, matched by (peer, opts.tag) in issue order. Not collective: ranks that take
  // no part keep their collective sequence numbers.
  void send(ConstBuffer data, int peer, const CollectiveOptions& opts = {});
  void recv(Buffer data, int peer, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> send_async(ConstBuffer data, int peer, const CollectiveOptions& opts = {});
  std::shared_ptr<Work> recv_async(Buffer data, int peer, const CollectiveOptions& opts = {});

  // Collective: `bytes` of zero-filled memory on every rank (the same size on every rank, else
  // MismatchError), shared with the other ranks of this rank's node where it can be
  // (RegisteredMemory::shared). Collectives on buffers inside it run in place on shared memory:
  // every rank of a node must then pass a buffer of the same allocation (at any offset), or
  // every rank private memory (else MismatchError). Freed when the last handle (and every
  // tensor made over it) is gone; the group may be destroyed before.
  std::shared_ptr<RegisteredMemory> allocate_registered(size_t bytes,
                                                        const CollectiveOptions& opts = {});

  // Collective over this group: ranks with the same color form a subgroup, ordered by
  // (key, rank). A negative color returns nullptr (the rank joins no subgroup).
  std::shared_ptr<Group> split(int color, int key, const CollectiveOptions& opts = {});

  // Breaks the group on every rank: pending and later calls throw Error(reason) here, and the
  // peers fail with the same error.
  void abort(const std::string& reason) noexcept;
  // The same with `error` itself, whose kind the peers see (a PeerError naming the dead rank
  // stays one: what a wrapper that meets a failure on one group tells its other groups).
  void abort(std::exception_ptr error) noexcept;

  // The error that broke this group (its first: every later call rethrows it), or null while it
  // works. A PeerError's failed_rank() numbers the ranks of the group that raised it.
  std::exception_ptr error() const noexcept;

  // Number of collectives issued so far (the next one gets this sequence number).
  uint64_t sequence_number() const;

 private:
  friend struct detail::GroupAccess;

  // The collectives that have a blocking form running inline (Scheduler::run_blocking,
  // src/comm/group/scheduler.h) build their operation once for both forms.
  Operation allreduce_operation(ConstBuffer in, Buffer out, const CollectiveOptions& opts) const;
  Operation barrier_operation(const CollectiveOptions& opts) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort
