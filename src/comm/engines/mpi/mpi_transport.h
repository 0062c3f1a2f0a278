// The MPI backend: one object that is both the group's transport (cohort's algorithms run over
// MPI point-to-point, MPI_Isend/MPI_Irecv) and its engine (MPI's own nonblocking collectives,
// MPI_Iallreduce, ..., in mpi_engine.cc), because both live on the same communicators and
// share one failure state and abort channel. The group holds it twice: as its transport and as
// its engine (Group::Impl::attach_engine).
//
// Every wait polls (MPI_Testall) until done, its deadline, or an abort notice from any rank,
// so nothing blocks forever inside MPI. Note [MPI tags] (mpi_tags.h) says how tags map.
#pragma once

#include <mpi.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "backends/collective_engine.h"
#include "engines/mpi/mpi_call.h"
#include "engines/mpi/mpi_tags.h"
#include "cohort/comm/transport.h"

namespace cohort {

class MpiTransport final : public Transport, public CollectiveEngine {
 public:
  // Collective over `comm`: duplicates it three times (cohort's collectives, send/recv, abort
  // notices) so that cohort's messages never match the program's own.
  static std::unique_ptr<MpiTransport> create(MPI_Comm comm, Deadline deadline);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                 Deadline deadline) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                 Deadline deadline) override;
  // Transport::abort and CollectiveEngine::abort: tells every peer, once.
  void abort(std::exception_ptr error) noexcept override;
  // MPI_Comm_create_group over the members: collective over them only.
  std::unique_ptr<Transport> split(const SplitSpec& spec) override;

  // ---- CollectiveEngine (mpi_engine.cc)
  const char* engine_name() const override { return "MPI"; }
  Backend kind() const override { return Backend::kMpi; }
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
  // The subgroup's transport (made by split) is its engine too.
  std::shared_ptr<CollectiveEngine> for_subgroup(HostCollectives& subgroup,
                                                 Deadline deadline) override;

  // Waits for every request (statuses may be null), polling for abort notices; throws
  // TimeoutError naming `what` at the deadline and the first failure of the group at once.
  void wait(std::vector<MPI_Request>& requests, MPI_Status* statuses, Deadline deadline,
            const std::string& what);
  void wait(MPI_Request& request, Deadline deadline, const std::string& what);
  // One nonblocking MPI call of the engine: checks for abort notices, posts it (`post` returns
  // the call's MPI return code), then waits under the deadline. `call` names it in errors.
  template <typename Post>
  void post_and_wait(const char* call, Deadline deadline, Post post) {
    check_notices();
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(post(&request), call);
    wait(request, deadline, call);
  }

 private:
  explicit MpiTransport(MPI_Comm collectives, MPI_Comm p2p, MPI_Comm control);
  void post_abort_receive();
  void poll_abort_notice();
  // Before posting or waiting: fails on a notice that has arrived, so that a rank arriving
  // late at a collective another rank abandoned does not complete it into freed memory there.
  void check_notices();
  void throw_if_failed();
  void fail(std::exception_ptr error);
  MPI_Comm communicator_for(Tag tag) const;
  int mpi_tag(Tag tag) const;

  MPI_Comm collectives_;  // cohort's algorithms and MPI's own collectives
  MPI_Comm p2p_;          // Group::send/recv
  MPI_Comm control_;      // abort notices
  int rank_ = 0;
  int size_ = 1;
  mpi::TagPacker tags_;

  std::atomic<bool> failed_{false};
  std::mutex failure_mutex_;  // guards failure_ and the abort channel
  std::exception_ptr failure_;
  MPI_Request abort_receive_ = MPI_REQUEST_NULL;
  std::vector<char> abort_inbox_;
  std::string abort_outbox_;  // what this rank sent, alive until the end
  std::vector<MPI_Request> abort_sends_;
};

}  // namespace cohort
