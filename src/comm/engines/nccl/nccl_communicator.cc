#include <algorithm>
#include <chrono>
#include <thread>

#include "engines/nccl/nccl_call.h"
#include "engines/nccl/nccl_engine.h"
#include "backends/polling.h"
#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {

// How long a destructor lets ncclCommFinalize flush the communicator's work before it aborts
// it instead (a peer that is gone would keep it in progress forever).
constexpr Milliseconds kFinalizeGrace{10000};

ncclResult_t state_of(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  nccl::check(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError", comm);
  return state;
}

// For a communicator nobody else can see yet (init, split): polls until it is ready; aborts it
// and throws on an error or at the deadline.
void wait_until_ready(ncclComm_t comm, const char* what, Deadline deadline) {
  const auto start = Clock::now();
  try {
    for (;;) {
      const ncclResult_t state = state_of(comm);
      if (state == ncclSuccess) return;
      nccl::check(state, what, comm);
      if (deadline.expired()) {
        throw TimeoutError(std::string(what) +
                           " did not complete by its deadline: a rank did not join, or NCCL "
                           "could not connect the ranks (NCCL_DEBUG=INFO says why)");
      }
      pause_between_polls(start);
    }
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
}

}  // namespace

std::unique_ptr<NcclEngine> NcclEngine::create(HostCollectives& host_group, int device,
                                               Deadline deadline) {
  // Rank 0's unique id, with a status byte so that its failure fails every rank at once
  // instead of leaving the others waiting for NCCL until the deadline.
  struct Offer {
    uint8_t ok = 0;
    ncclUniqueId id{};
  } offer;
  if (host_group.rank() == 0) {
    offer.ok = ncclGetUniqueId(&offer.id) == ncclSuccess ? 1 : 0;
  }
  host_group.broadcast(&offer, sizeof offer, /*root=*/0, deadline);
  if (!offer.ok) {
    throw ConfigError(
        "rank 0 could not make NCCL's unique id (ncclGetUniqueId failed; "
        "NCCL_DEBUG=INFO on rank 0 says why)");
  }
  nccl::DeviceGuard guard(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // Note [NCCL deadlines]
  ncclComm_t comm = nullptr;
  nccl::check(
      ncclCommInitRankConfig(&comm, host_group.size(), offer.id, host_group.rank(), &config),
      "ncclCommInitRankConfig");
  wait_until_ready(comm, "ncclCommInitRankConfig", deadline);
  try {
    return std::unique_ptr<NcclEngine>(
        new NcclEngine(comm, host_group.rank(), host_group.size(), device));
  } catch (...) {
    ncclCommAbort(comm);
    throw;
  }
}

NcclEngine::NcclEngine(ncclComm_t comm, int rank, int size, int device)
    : comm_(comm), device_(device), rank_(rank), size_(size) {
  nccl::DeviceGuard guard(device_);
  try {
    // Non-blocking: the legacy default stream must not serialize with communication.
    nccl::check_cuda(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags");
    nccl::check_cuda(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    nccl::check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    nccl::check_cuda(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
    nccl::check_cuda(cudaMemset(scratch_, 0, sizeof(float)), "cudaMemset (barrier scratch)");
  } catch (...) {
    release_device_resources();
    throw;
  }
}

NcclEngine::~NcclEngine() {
  try {
    nccl::DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (!failed_.load(std::memory_order_acquire) && comm_ != nullptr) {
      // Flush what was queued, bounded by kFinalizeGrace; abort when it does not finish.
      ncclResult_t state = ncclCommFinalize(comm_);
      const Deadline grace = Deadline::after(kFinalizeGrace);
      const auto start = Clock::now();
      while (state == ncclInProgress && !grace.expired() &&
             ncclCommGetAsyncError(comm_, &state) == ncclSuccess) {
        pause_between_polls(start);
      }
      if (state == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    comm_ = nullptr;
  } catch (...) {
    // noexcept: a device that cannot be selected any more leaves nothing to flush.
  }
  release_device_resources();
}

void NcclEngine::release_device_resources() noexcept {
  // cudaFree waits for the device; the events and the stream are released once their work
  // is done.
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  scratch_ = nullptr;
  ready_ = done_ = nullptr;
  comm_stream_ = nullptr;
}

void NcclEngine::abort(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (failed_.load(std::memory_order_acquire)) return;
    failure_ = error;
    failed_.store(true, std::memory_order_release);
    // Stops this rank's kernels and frees the communicator; nothing touches comm_ after this.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  // ncclCommAbort tells nobody: the peers learn of it from the group's host transport, which
  // Group::abort aborts too, or from NCCL itself as a remote error.
}

void NcclEngine::throw_if_failed() {
  if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(failure_);
}

void NcclEngine::settle(const char* what, Deadline deadline) {
  const auto start = Clock::now();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(comm_mutex_);
      throw_if_failed();
      const ncclResult_t state = state_of(comm_);
      if (state == ncclSuccess) return;
      nccl::check(state, what, comm_);
    }
    if (deadline.expired()) {
      throw TimeoutError(std::string(what) +
                         " was still in progress in NCCL at its deadline (a rank did not join "
                         "it, or NCCL could not connect to it)");
    }
    pause_between_polls(start);
  }
}

void NcclEngine::wait_for_done(const char* what, Deadline deadline) {
  const auto start = Clock::now();
  for (;;) {
    const cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) nccl::check_cuda(rc, what);
    settle(what, deadline);  // throws on an asynchronous NCCL error or an abort
    if (deadline.expired()) {
      throw TimeoutError(std::string(what) +
                         " did not finish on the device by its deadline (a rank did not join it)");
    }
    pause_between_polls(start);
  }
}

void NcclEngine::check_device(int device, const char* what) const {
  COHORT_CHECK(device == device_, what, ": the buffer is on ", place_name(device),
               " but this NCCL group is on CUDA device ", device_);
}

std::shared_ptr<CollectiveEngine> NcclEngine::for_subgroup(HostCollectives& subgroup,
                                                           Deadline deadline) {
  throw_if_failed();
  return create(subgroup, device_, deadline);
}

}  // namespace cohort
