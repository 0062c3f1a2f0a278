// NCCL's collectives for the Group (CollectiveEngine), on device buffers only (the group runs
// host buffers on cohort's algorithms): queued on the communication stream between the event
// hand-offs of Note [NCCL streams] (nccl_engine.h); the host waits only for NCCL to accept
// the call.
// Gather, scatter, all-to-all, send and recv are ncclSend/ncclRecv inside
// ncclGroupStart/ncclGroupEnd; barrier is a one-float allreduce the host waits for.
#include <cstdint>

#include "engines/nccl/nccl_call.h"
#include "engines/nccl/nccl_engine.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "kernels/byte_ranges.h"

namespace cohort {

namespace {

const uint8_t* bytes_at(const void* base, size_t offset) {
  return static_cast<const uint8_t*>(base) + offset;
}
uint8_t* bytes_at(void* base, size_t offset) {
  return static_cast<uint8_t*>(base) + offset;
}

// NCCL takes an input that is this rank's block of the output (its in-place form) and inputs
// apart from the output, nothing in between.
void check_in_place_form(const void* in, size_t in_bytes, const void* block, const void* out,
                         size_t out_bytes, const char* what) {
  COHORT_CHECK(in == block || !kernels::ranges_overlap(in, in_bytes, out, out_bytes), what,
               " on NCCL: the input overlaps the output other than as this rank's block of it; "
               "use separate buffers or that in-place layout");
}

// ncclGroupEnd on every path out of a group of calls (NCCL requires the pairing).
class NcclGroupScope {
 public:
  NcclGroupScope() { nccl::check(ncclGroupStart(), "ncclGroupStart"); }
  ~NcclGroupScope() {
    if (open_) ncclGroupEnd();
  }
  NcclGroupScope(const NcclGroupScope&) = delete;
  NcclGroupScope& operator=(const NcclGroupScope&) = delete;
  void end(ncclComm_t comm) {
    open_ = false;
    nccl::check(ncclGroupEnd(), "ncclGroupEnd", comm);
  }

 private:
  bool open_ = true;
};

}  // namespace

template <typename Queue>
void NcclEngine::on_comm_stream(const EngineCall& call, const char* what, Queue queue) {
  throw_if_failed();
  check_device(call.device, what);
  nccl::DeviceGuard guard(device_);
  cudaStream_t caller =
      call.stream != nullptr ? static_cast<cudaStream_t>(call.stream) : cudaStreamLegacy;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    throw_if_failed();
    nccl::check_cuda(cudaEventRecord(ready_, caller), "cudaEventRecord (caller's stream)");
    nccl::check_cuda(cudaStreamWaitEvent(comm_stream_, ready_, 0),
                     "cudaStreamWaitEvent (communication stream)");
    queue(comm_stream_);
  }
  // A nonblocking communicator may still be queueing the call (ncclInProgress): the done event
  // must come after it on the stream, so it is recorded once NCCL has it.
  settle(what, call.deadline);
  std::lock_guard<std::mutex> lock(comm_mutex_);
  throw_if_failed();
  nccl::check_cuda(cudaEventRecord(done_, comm_stream_), "cudaEventRecord (communication stream)");
  nccl::check_cuda(cudaStreamWaitEvent(caller, done_, 0), "cudaStreamWaitEvent (caller's stream)");
}

// Every cohort dtype has an NCCL type and every op an NCCL op (kAvg: ncclAvg), counts are
// size_t. A ring shift is not offered (the group refuses it on device buffers by name).
bool NcclEngine::supports(CollectiveKind kind, DType, ReduceOp, size_t) const {
  return kind != CollectiveKind::kRingShift;
}

void NcclEngine::allreduce(const void* in, void* data, size_t count, DType dtype, ReduceOp op,
                           const EngineCall& call) {
  on_comm_stream(call, "ncclAllReduce", [&](cudaStream_t stream) {
    nccl::check(
        ncclAllReduce(in, data, count, nccl::datatype(dtype), nccl::reduction(op), comm_, stream),
        "ncclAllReduce", comm_);
  });
}

void NcclEngine::broadcast(void* data, size_t count, DType dtype, int root,
                           const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  on_comm_stream(call, "ncclBroadcast", [&](cudaStream_t stream) {
    nccl::check(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream), "ncclBroadcast",
                comm_);
  });
}

void NcclEngine::reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
                        const EngineCall& call) {
  // In place: recvbuff is only written on the root.
  on_comm_stream(call, "ncclReduce", [&](cudaStream_t stream) {
    nccl::check(ncclReduce(data, data, count, nccl::datatype(dtype), nccl::reduction(op), root,
                           comm_, stream),
                "ncclReduce", comm_);
  });
}

void NcclEngine::allgather(const void* in, void* out, size_t count, DType dtype,
                           const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  const size_t total = bytes * static_cast<size_t>(size_);
  check_in_place_form(in, bytes, bytes_at(out, bytes * static_cast<size_t>(rank_)), out, total,
                      "allgather");
  on_comm_stream(call, "ncclAllGather", [&](cudaStream_t stream) {
    nccl::check(ncclAllGather(in, out, bytes, ncclUint8, comm_, stream), "ncclAllGather", comm_);
  });
}

void NcclEngine::reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                const EngineCall& call) {
  const size_t block = count * dtype_size(dtype);
  const size_t total = block * static_cast<size_t>(size_);
  // NCCL's in-place form has the output at this rank's block of the input.
  COHORT_CHECK(out == bytes_at(in, block * static_cast<size_t>(rank_)) ||
                   !kernels::ranges_overlap(in, total, out, block),
               "reduce_scatter on NCCL: the output overlaps the input other than as this rank's "
               "block of it; use separate buffers or that in-place layout");
  on_comm_stream(call, "ncclReduceScatter", [&](cudaStream_t stream) {
    nccl::check(ncclReduceScatter(in, out, count, nccl::datatype(dtype), nccl::reduction(op), comm_,
                                  stream),
                "ncclReduceScatter", comm_);
  });
}

void NcclEngine::gather(const void* in, void* out, size_t count, DType dtype, int root,
                        const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  const size_t total = bytes * static_cast<size_t>(size_);
  void* own_block = rank_ == root ? bytes_at(out, bytes * static_cast<size_t>(root)) : nullptr;
  if (rank_ == root) check_in_place_form(in, bytes, own_block, out, total, "gather");
  on_comm_stream(call, "gather (ncclSend/ncclRecv)", [&](cudaStream_t stream) {
    if (rank_ == root && own_block != in && bytes > 0) {
      nccl::check_cuda(cudaMemcpyAsync(own_block, in, bytes, cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpyAsync (gather, the root's own block)");
    }
    NcclGroupScope group;
    if (rank_ != root) {
      nccl::check(ncclSend(in, bytes, ncclUint8, root, comm_, stream), "ncclSend", comm_);
    } else {
      for (int r = 0; r < size_; ++r) {
        if (r == root) continue;
        nccl::check(ncclRecv(bytes_at(out, bytes * static_cast<size_t>(r)), bytes, ncclUint8, r,
                             comm_, stream),
                    "ncclRecv", comm_);
      }
    }
    group.end(comm_);
  });
}

void NcclEngine::scatter(const void* in, void* out, size_t count, DType dtype, int root,
                         const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  const size_t total = bytes * static_cast<size_t>(size_);
  const void* own_block = rank_ == root ? bytes_at(in, bytes * static_cast<size_t>(root)) : nullptr;
  if (rank_ == root) {
    COHORT_CHECK(out == own_block || !kernels::ranges_overlap(in, total, out, bytes),
                 "scatter on NCCL: the output overlaps the root's input other than as the root's "
                 "block of it; use separate buffers or that in-place layout");
  }
  on_comm_stream(call, "scatter (ncclSend/ncclRecv)", [&](cudaStream_t stream) {
    if (rank_ == root && own_block != out && bytes > 0) {
      nccl::check_cuda(cudaMemcpyAsync(out, own_block, bytes, cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpyAsync (scatter, the root's own block)");
    }
    NcclGroupScope group;
    if (rank_ != root) {
      nccl::check(ncclRecv(out, bytes, ncclUint8, root, comm_, stream), "ncclRecv", comm_);
    } else {
      for (int r = 0; r < size_; ++r) {
        if (r == root) continue;
        nccl::check(ncclSend(bytes_at(in, bytes * static_cast<size_t>(r)), bytes, ncclUint8, r,
                             comm_, stream),
                    "ncclSend", comm_);
      }
    }
    group.end(comm_);
  });
}

// The Group refuses overlapping all_to_all buffers before this is reached.
void NcclEngine::all_to_all(const void* in, void* out, size_t block_count, DType dtype,
                            const EngineCall& call) {
  const size_t block_bytes = block_count * dtype_size(dtype);
  on_comm_stream(call, "all_to_all (ncclSend/ncclRecv)", [&](cudaStream_t stream) {
    NcclGroupScope group;
    for (int r = 0; r < size_; ++r) {
      const size_t offset = block_bytes * static_cast<size_t>(r);
      nccl::check(ncclSend(bytes_at(in, offset), block_bytes, ncclUint8, r, comm_, stream),
                  "ncclSend", comm_);
      nccl::check(ncclRecv(bytes_at(out, offset), block_bytes, ncclUint8, r, comm_, stream),
                  "ncclRecv", comm_);
    }
    group.end(comm_);
  });
}

// A barrier the host waits for, unlike the other calls: every rank has reached it, and the
// work queued on the caller's stream before it has finished on this rank.
void NcclEngine::barrier(const EngineCall& call) {
  const EngineCall on_device{call.deadline, device_, call.stream};
  on_comm_stream(on_device, "ncclAllReduce (barrier)", [&](cudaStream_t stream) {
    nccl::check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream),
                "ncclAllReduce (barrier)", comm_);
  });
  wait_for_done("ncclAllReduce (barrier)", call.deadline);
}

void NcclEngine::send(const void* data, size_t count, DType dtype, int peer,
                      const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  on_comm_stream(call, "ncclSend", [&](cudaStream_t stream) {
    nccl::check(ncclSend(data, bytes, ncclUint8, peer, comm_, stream), "ncclSend", comm_);
  });
}

void NcclEngine::recv(void* data, size_t count, DType dtype, int peer, const EngineCall& call) {
  const size_t bytes = count * dtype_size(dtype);
  on_comm_stream(call, "ncclRecv", [&](cudaStream_t stream) {
    nccl::check(ncclRecv(data, bytes, ncclUint8, peer, comm_, stream), "ncclRecv", comm_);
  });
}

}  // namespace cohort
