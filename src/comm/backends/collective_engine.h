// A backend engine's own collectives (Note [Backends] in backends/backend.h): MPI's and
// NCCL's. A group holds its engine beside its transport (Group::Impl), never inside it:
//  - an engine of host memory (MPI, whose transport is MPI point-to-point on the same
//    communicator) runs a collective when the group chose Algorithm::kEngine
//    (COHORT_ALGO=engine, or COHORT_MPI_COLLECTIVES=mpi) and has it for the dtype and op, else
//    cohort's own algorithms run it over the group's transport (NativeBackend);
//  - an engine of device memory only (NCCL) runs every call on device buffers, and barriers;
//    host buffers of its group go to cohort's algorithms over the group's host transport.
//
// Every call blocks until done or until its deadline (TimeoutError), and fails promptly when the
// group is aborted on any rank. Every call takes elements of a dtype (DType::kUInt8 for raw
// bytes), as CollectiveCall counts them. Device memory (EngineCall::device >= 0, NCCL only) is
// the exception to blocking: a call returns once the collective is queued on the device,
// ordered on EngineCall::stream (docs/backends.md, "The NCCL backend").
#pragma once

#include <cstddef>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/host_collectives.h"
#include "cohort/comm/buffer.h"
#include "cohort/comm/options.h"
#include "cohort/comm/transport.h"
#include "cohort/core/deadline.h"
#include "cohort/core/dtype.h"

namespace cohort {

// What every engine call gets besides its buffers. Converts from a Deadline, for the group's
// own bookkeeping in host memory (topology, cost model, debug checks).
struct EngineCall {
  Deadline deadline;
  int device = kHostMemory;                // where the call's buffers are (buffer.h)
  void* stream = nullptr;                  // device buffers: CollectiveOptions::stream
  EngineCall(Deadline d) : deadline(d) {}  // NOLINT: see above
  EngineCall(Deadline d, int dev, void* s) : deadline(d), device(dev), stream(s) {}
};

class CollectiveEngine : public CollectiveBackend {
 public:
  const char* backend_name() const override { return engine_name(); }
  // Runs `call` on the engine method of its kind; kAvg on host memory is summed and divided
  // here (MPI has no average). `plan` must say kEngine.
  void run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) override;

  // A short word for errors and logs: "MPI".
  virtual const char* engine_name() const = 0;
  // This rank and the number of ranks of the engine's communicator (the group's).
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether `kind` runs on the engine for this dtype, op and element count (MPI has no
  // float16, no average, and counts are int).
  virtual bool supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const = 0;

  // Whether the engine takes host buffers (MPI) and device buffers (EngineCall::device >= 0,
  // NCCL).
  virtual bool handles_host_memory() const { return true; }
  virtual bool handles_device_memory() const { return false; }
  // Throws InvalidArgument for a device buffer the engine cannot take (NCCL: one on another
  // GPU than its communicator's). The Group asks on the caller's thread, before queueing.
  virtual void check_device(int device, const char* what) const {}

  // kAvg is passed for device memory only; for host memory the Group sums and divides.
  // Out of place when in != data.
  virtual void allreduce(const void* in, void* data, size_t count, DType dtype, ReduceOp op,
                         const EngineCall& call) = 0;
  virtual void broadcast(void* data, size_t count, DType dtype, int root,
                         const EngineCall& call) = 0;
  // In place on the root; other ranks' data is only read.
  virtual void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                      const EngineCall& call) = 0;
  // in holds `count` elements, out size() blocks of them.
  virtual void allgather(const void* in, void* out, size_t count, DType dtype,
                         const EngineCall& call) = 0;
  // in holds size() blocks of `count` elements; out gets this rank's reduced block.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                              const EngineCall& call) = 0;
  // `count`: the elements of one rank's block.
  virtual void gather(const void* in, void* out, size_t count, DType dtype, int root,
                      const EngineCall& call) = 0;
  virtual void scatter(const void* in, void* out, size_t count, DType dtype, int root,
                       const EngineCall& call) = 0;
  virtual void all_to_all(const void* in, void* out, size_t block_count, DType dtype,
                          const EngineCall& call) = 0;
  virtual void barrier(const EngineCall& call) = 0;
  // Group::send/recv of device buffers: matched in issue order per pair of ranks (the engine
  // has no tags). Host messages go over the group's transport.
  virtual void send(const void* data, size_t count, DType dtype, int peer, const EngineCall& call);
  virtual void recv(void* data, size_t count, DType dtype, int peer, const EngineCall& call);

  // For groups built without a store: a key per rank, equal for ranks that share a host, in
  // rank order (the group's topology). This one all-gathers the host names.
  virtual std::vector<std::string> node_keys(Deadline deadline);

  // Fails every pending and later call with `error` (Group::abort, which aborts the group's
  // transport too).
  virtual void abort(std::exception_ptr error) noexcept = 0;

  // The engine of `subgroup`, which Group::split has just made of some of this engine's ranks
  // (its transport, store and topology in place, no engine yet). Collective over the
  // subgroup's members only.
  virtual std::shared_ptr<CollectiveEngine> for_subgroup(HostCollectives& subgroup,
                                                         Deadline deadline) = 0;
};

}  // namespace cohort
