// Note [Backends]: Group -> CollectiveBackend -> bytes (docs/architecture.md, "Layers").
//
// A CollectiveBackend runs collectives (not the public cohort::Backend of init.h, which names
// the backend a job asks for). Group checks a call's arguments and chooses, once per call and
// in one place (Dispatcher::dispatch, group/dispatcher.cc), which backend runs it and with which
// algorithm; the backend then runs it whole, averages included. There are two kinds:
//  - NativeBackend: cohort's own algorithms (src/comm/algorithms/) over the group's Transport,
//    which only moves tagged point-to-point messages;
//  - CollectiveEngine (MPI, NCCL): an engine's own collectives.
// A backend handed a call or an algorithm it does not have throws InvalidArgument naming
// itself and the call: nothing falls back silently below the Group.
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/context.h"
#include "cohort/comm/buffer.h"
#include "cohort/comm/options.h"
#include "cohort/core/dtype.h"

namespace cohort {

// One collective as a backend sees it. `count` is in elements of `dtype`, as in the call's
// signature: the whole buffer for allreduce, broadcast and reduce; one rank's block for
// allgather (the input), reduce_scatter (the output), gather (the input) and scatter (the
// output); the whole input (size() blocks) for all_to_all; 0 for a barrier. `in` == `out` for
// the in-place collectives (broadcast, reduce: `out` only).
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  DType dtype = DType::kUInt8;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  int device = kHostMemory;  // where the buffers are (buffer.h)
  void* stream = nullptr;    // device buffers: CollectiveOptions::stream
  // The registered memory the input and the output lie in (Buffer::registered), where they do.
  RegisteredPair registered;

  size_t bytes() const { return count * dtype_size(dtype); }
  // "allreduce(count=..., dtype=..., op=...)": for errors.
  std::string describe() const;
};

// "host memory" or "CUDA device 2", for errors about where a buffer is.
std::string place_name(int device);

// How a call runs: the algorithm, and for a hierarchical allreduce the one across nodes.
struct Plan {
  Algorithm algorithm = Algorithm::kAuto;
  Algorithm across = Algorithm::kRing;
};

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  // A short word for errors and logs: "cohort", "MPI", "NCCL".
  virtual const char* backend_name() const = 0;
  // Which of the public Backend list this is (kNative for cohort's algorithms, staged or not).
  virtual Backend kind() const = 0;
  // Runs `call` with `plan` to the end (kAvg divided); throws InvalidArgument when it cannot.
  virtual void run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) = 0;
};

}  // namespace cohort
