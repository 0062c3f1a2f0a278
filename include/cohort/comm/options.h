// Options every collective takes (docs/architecture.md: timeout, tag, algorithm override, reduce
// op).
#pragma once

#include <cstdint>
#include <string>

#include "cohort/comm/call_site.h"
#include "cohort/core/deadline.h"
#include "cohort/core/dtype.h"

namespace cohort {

enum class Algorithm : uint8_t {
  kAuto,             // chosen by message size and world size (see docs/algorithms.md)
  kRing,             // bandwidth-optimal, 2(n-1) steps
  kTree,             // binary/binomial tree reduce + broadcast, log n depth
  kHalvingDoubling,  // Rabenseifner: recursive halving reduce-scatter + doubling all-gather
  kDirect,           // every rank talks to every rank at once: one round, for tiny messages
  kShm,              // through shared memory, when every rank runs on one host
  kHierarchical,     // allreduce: shared memory inside each host, a ring or halving-doubling
                     // between hosts (same number of ranks on every host)
  kEngine,           // the backend engine's own collective (MPI_Allreduce, ncclAllReduce, ...):
                     // groups of the MPI and NCCL backends only (docs/backends.md)
};

const char* algorithm_name(Algorithm algorithm);
// "auto", "ring", "tree", "hd"/"halving_doubling", "direct", "shm", "hierarchical"/"hier",
// "engine";
// throws InvalidArgument otherwise.
Algorithm parse_algorithm(const std::string& name);

// What runs a group's collectives (docs/backends.md): the one list of backends, which
// InitOptions::backend picks from and Group::backend() reports.
enum class Backend : uint8_t {
  kAuto,    // InitOptions only. COHORT_BACKEND=auto|native|mpi; auto: kMpi when an MPI
            // launcher started this process (mpirun, mpiexec) and cohort was built with MPI,
            // else kNative
  kNative,  // cohort's algorithms over its transports: shared memory within a host, TCP
            // between hosts, a store (and the staged CUDA groups, through host copies)
  kMpi,     // MPI_COMM_WORLD (mpi.h): no store, no MASTER_ADDR
  kNccl,    // NCCL for device buffers (nccl.h), over a host group for the rest; made by
            // create_nccl_group, never by init()
};
// "native", "MPI", "NCCL" (and "auto").
const char* backend_name(Backend backend);

enum class CollectiveKind : uint8_t {
  kAllreduce,
  kBroadcast,
  kReduce,
  kAllgather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kRingShift,
  kBarrier,
  kSend,
  kRecv
};
const char* collective_name(CollectiveKind kind);

struct CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;            // allreduce, reduce, reduce_scatter
  int root = 0;                            // broadcast, reduce, gather, scatter
  Algorithm algorithm = Algorithm::kAuto;  // overrides COHORT_ALGO and the group's default
  Milliseconds timeout{0};                 // 0: the group's timeout (COHORT_TIMEOUT_S)
  uint32_t tag = 0;                        // send/recv: tells apart messages between two ranks
  // Device buffers (NCCL groups): the cudaStream_t the buffers are produced and consumed on.
  // The collective starts after the work queued on it so far and the stream's later work
  // waits for the collective; the host does not wait (docs/backends.md, "The NCCL backend").
  // Null: the legacy default stream. Ignored for host buffers.
  void* stream = nullptr;
  // Who issues the collective; only named in errors (Note [Call site names]).
  CallSite site = CallSite::kUser;
};

}  // namespace cohort
