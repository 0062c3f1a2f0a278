// A backend engine's own collectives (DESIGN.md: existing engines are backends beside the
// native one). A transport that sits on an engine (MPI) exposes one through
// Transport::engine(); the Group runs a collective on it when the algorithm is kEngine
// (COHORT_ALGO=engine, or COHORT_MPI_COLLECTIVES=mpi) and the engine has that collective for
// the dtype and op, else it runs cohort's own algorithms over the same transport.
//
// Every call blocks until done or until `deadline` (TimeoutError), and fails promptly when the
// group is aborted on any rank. Reductions take the element count; the rest take bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cohort/comm/options.h"
#include "cohort/comm/transport.h"
#include "cohort/core/deadline.h"
#include "cohort/core/dtype.h"

namespace cohort {

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // A short word for errors and logs: "MPI".
  virtual const char* engine_name() const = 0;
  // Whether `kind` runs on the engine for this dtype, op and element count (MPI has no
  // float16, no average, and counts are int).
  virtual bool supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const = 0;

  // kAvg is never passed: the Group sums and divides.
  virtual void allreduce(void* data, size_t count, DType dtype, ReduceOp op, Deadline deadline) = 0;
  virtual void broadcast(void* data, size_t bytes, int root, Deadline deadline) = 0;
  // In place on the root; other ranks' data is only read.
  virtual void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                      Deadline deadline) = 0;
  // out holds size() blocks of `bytes`.
  virtual void allgather(const void* in, void* out, size_t bytes, Deadline deadline) = 0;
  // in holds size() blocks of `count` elements; out gets this rank's reduced block.
  virtual void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                              Deadline deadline) = 0;
  virtual void gather(const void* in, void* out, size_t bytes, int root, Deadline deadline) = 0;
  virtual void scatter(const void* in, void* out, size_t bytes, int root, Deadline deadline) = 0;
  virtual void all_to_all(const void* in, void* out, size_t block_bytes, Deadline deadline) = 0;
  virtual void barrier(Deadline deadline) = 0;

  // For groups built without a store: a key per rank, equal for ranks that share a host, in
  // rank order (the group's topology).
  virtual std::vector<std::string> node_keys(Deadline deadline) = 0;

  // Group::split on an engine: collective over every rank of the group, members or not (an
  // engine's communicator split, like MPI_Comm_split, needs them all). Ranks with the same
  // non-negative color form a transport ordered by `key`; a negative color gets nullptr.
  virtual std::unique_ptr<Transport> split_communicator(int color, int key, Deadline deadline) = 0;
};

}  // namespace cohort
