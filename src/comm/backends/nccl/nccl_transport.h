// The NCCL backend's transport: an NCCL communicator on one CUDA device, with a dedicated
// communication stream, and a private host-memory group of the same ranks for everything that
// is not device memory (topology, cost model, debug checks, DDP's flags). It moves no tagged
// messages of its own: every call of its Group runs on it as a CollectiveEngine
// (engine_only), collectives in nccl_engine.cc.
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
#include "cohort/comm/group.h"
#include "cohort/comm/transport.h"

namespace cohort {

class NcclTransport final : public Transport, public CollectiveEngine {
 public:
  // Collective over `host_group`, whose ranks become this communicator's: rank 0 makes the
  // unique id and broadcasts it through the group. The caller keeps no other use of
  // `host_group` (its collectives must come in the same order on every rank).
  static std::unique_ptr<NcclTransport> create(std::shared_ptr<Group> host_group, int device,
                                               Deadline deadline);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "nccl"; }
  int device() const { return device_; }

  // Never called (engine_only): cohort's algorithms do not run over NCCL.
  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override;
  void abort(std::exception_ptr error) noexcept override;
  // Not used: a group on NCCL splits through split_communicator.
  std::unique_ptr<Transport> split(const std::string& key, int new_rank, int new_size,
                                   std::shared_ptr<Store> store) override;
  CollectiveEngine* engine() override { return this; }

  // ---- CollectiveEngine (nccl_engine.cc)
  const char* engine_name() const override { return "NCCL"; }
  bool engine_only() const override { return true; }
  bool handles_device_memory() const override { return true; }
  void check_device(int device, const char* what) const override;
  bool supports(CollectiveKind kind, DType dtype, ReduceOp op, size_t count) const override;
  void allreduce(const void* in, void* data, size_t count, DType dtype, ReduceOp op,
                 const EngineCall& call) override;
  void broadcast(void* data, size_t count, DType dtype, int root,
                 const EngineCall& call) override;
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
  void send(const void* data, size_t count, DType dtype, int peer,
            const EngineCall& call) override;
  void recv(void* data, size_t count, DType dtype, int peer, const EngineCall& call) override;
  std::vector<std::string> node_keys(Deadline deadline) override;
  std::unique_ptr<Transport> split_communicator(int color, int key, Deadline deadline) override;

 private:
  NcclTransport(ncclComm_t comm, std::shared_ptr<Group> host_group, int device);

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
  CollectiveOptions host_options(const EngineCall& call, int root = 0) const;

  ncclComm_t comm_ = nullptr;
  std::shared_ptr<Group> host_group_;
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
