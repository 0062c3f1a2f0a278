// A backend engine's own collectives (Note [Backends] in backends/backend.h): MPI's and
// NCCL's. A transport that sits on an engine (MPI) exposes one through Transport::engine();
// the Group runs a collective on it when it chose Algorithm::kEngine (COHORT_ALGO=engine, or
// COHORT_MPI_COLLECTIVES=mpi) and the engine has that collective for the dtype and op, else
// cohort's own algorithms over the same transport (NativeBackend). An engine_only() engine
// (NCCL) runs everything of its group.
//
// Every call blocks until done or until its deadline (TimeoutError), and fails promptly when the
// group is aborted on any rank. Every call takes elements of a dtype (DType::kUInt8 for raw
// bytes), as CollectiveCall counts them. Device memory (EngineCall::device >= 0, NCCL only) is
// the exception to blocking: a call returns once the collective is queued on the device,
// ordered on EngineCall::stream (docs/backends.md, "The NCCL backend").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
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
  // Whether `kind` runs on the engine for this dtype, op and element count (MPI has no
  // float16, no average, and counts are int).
  virtual bool supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const = 0;

  // Whether the group must run every collective, send and recv on the engine: cohort's own
  // algorithms cannot run over its transport (NCCL has no tagged host messages).
  virtual bool engine_only() const { return false; }
  // Whether the engine takes device buffers (EngineCall::device >= 0).
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
  // Group::send/recv, for engine_only() engines: matched in issue order per pair of ranks
  // (the engine has no tags).
  virtual void send(const void* data, size_t count, DType dtype, int peer, const EngineCall& call);
  virtual void recv(void* data, size_t count, DType dtype, int peer, const EngineCall& call);

  // For groups built without a store: a key per rank, equal for ranks that share a host, in
  // rank order (the group's topology).
  virtual std::vector<std::string> node_keys(Deadline deadline) = 0;

  // Group::split on an engine: collective over every rank of the group, members or not (an
  // engine's communicator split, like MPI_Comm_split, needs them all). Ranks with the same
  // non-negative color form a transport ordered by `key`; a negative color gets nullptr.
  virtual std::unique_ptr<Transport> split_communicator(int color, int key, Deadline deadline) = 0;
};

}  // namespace cohort
