// The NCCL backend's engine: an NCCL communicator on one CUDA device, with a dedicated
// communication stream (lifecycle in nccl_communicator.cc, collectives in nccl_collectives.cc).
// It takes device buffers only. Its group is an ordinary group of host transport (a split of
// the bootstrap group) with this engine beside it: host buffers (DDP's flags, the group's own
// bookkeeping) run on cohort's algorithms over that transport, device buffers and barriers
// here (Note [Backends]).
//
// Note [NCCL streams]: a call on device buffers records an event on the caller's stream
// (CollectiveOptions::stream, else the legacy default stream), makes the communication stream
// wait for it, queues the NCCL call there, records a done event and makes the caller's stream
// wait for that. The host never waits for the device on this path (barrier excepted), so a
// Work on device buffers completes when the collective is queued, not when it has run.
//
// Note [NCCL deadlines]: the communicator is nonblocking (ncclConfig_t::blocking = 0), so
// initialization, connection set-up inside a call and ncclGroupEnd return ncclInProgress instead
// of blocking; the host polls ncclCommGetAsyncError until done, an error, its deadline or an
// abort. Group::abort calls ncclCommAbort. None of this has run on a GPU yet: it is written
// from NCCL's documentation and compiled against NCCL 2.28 headers only.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backends/collective_engine.h"

namespace cohort {

class NcclEngine final : public CollectiveEngine {
 public:
  // Collective over `host_group`, whose ranks become this communicator's: rank 0 makes the
  // unique id and broadcasts it through the group's host collectives.
  static std::unique_ptr<NcclEngine> create(HostCollectives& host_group, int device,
                                            Deadline deadline);
  ~NcclEngine() override;
  NcclEngine(const NcclEngine&) = delete;
  NcclEngine& operator=(const NcclEngine&) = delete;

  const char* engine_name() const override { return "NCCL"; }
  Backend kind() const override { return Backend::kNccl; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  bool handles_host_memory() const override { return false; }
  bool handles_device_memory() const override { return true; }
  // ncclCommAbort; the group aborts its host transport too, which tells the peers.
  void abort(std::exception_ptr error) noexcept override;
  // A communicator of its own for the subgroup, on the same device (ncclCommInitRankConfig
  // with an id through the subgroup's host collectives): collective over its members only,
  // where ncclCommSplit would need every rank of this one.
  std::shared_ptr<CollectiveEngine> for_subgroup(HostCollectives& subgroup,
                                                 Deadline deadline) override;

  // ---- collectives (nccl_collectives.cc), device buffers only
  void check_device(int device, const char* what) const override;
  bool supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const override;
  void allreduce(const void* in, void* data, size_t count, DType dtype, ReduceOp op,
                 const EngineCall& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root, const EngineCall& call) override;
  void reduce(void* data, size_t count, DType dtype, ReduceOp op, int root,
              const EngineCall& call) override;
  void allgather(const void* in, void* out, size_t count, DType dtype,
                 const EngineCall& call) override;
  void reduce_scatter(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      const EngineCall& call) override;
  void gather(const void* in, void* out, size_t count, DType dtype, int root,
              const EngineCall& call) override;
  void scatter(const void* in, void* out, size_t count, DType dtype, int root,
               const EngineCall& call) override;
  void all_to_all(const void* in, void* out, size_t block_count, DType dtype,
                  const EngineCall& call) override;
  void barrier(const EngineCall& call) override;
  void send(const void* data, size_t count, DType dtype, int peer, const EngineCall& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const EngineCall& call) override;

 private:
  NcclEngine(ncclComm_t comm, int rank, int size, int device);

  // Note [NCCL streams]: runs `queue(comm_stream)` (NCCL calls, under the communicator's lock)
  // between the two event hand-offs, then settles ncclInProgress by `call.deadline`.
  template <typename Queue>
  void on_comm_stream(const EngineCall& call, const char* what, Queue queue);
  // Polls the communicator until it is no longer ncclInProgress (Note [NCCL deadlines]).
  void settle(const char* what, Deadline deadline);
  // Waits on the host for done_ (barrier), polling for asynchronous NCCL errors.
  void wait_for_done(const char* what, Deadline deadline);
  void throw_if_failed();
  void release_device_resources() noexcept;

  ncclComm_t comm_ = nullptr;
  int device_ = 0;
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;  // recorded on the caller's stream
  cudaEvent_t done_ = nullptr;   // recorded on comm_stream_
  void* scratch_ = nullptr;      // one float on the device: the barrier's allreduce

  // Guards comm_ against ncclCommAbort from another thread while a call or a poll uses it.
  std::mutex comm_mutex_;
  std::atomic<bool> failed_{false};
  std::exception_ptr failure_;  // set once, under comm_mutex_, before failed_
};

}  // namespace cohort
