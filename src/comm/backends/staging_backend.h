// Note [Staged device buffers]: how a group without a device engine runs calls on device
// buffers (create_cuda_staged_group, cohort/comm/cuda_staging.h).
//
// cohort's algorithms read and write with the CPU, so a call on device buffers runs them on a
// copy in host memory (DeviceStaging::host_area, page-locked):
//  1. every copy is ordered after the work the caller queued on its stream before the call
//     (DeviceStaging::begin);
//  2. allreduce, broadcast and reduce are elementwise, so they go a chunk at a time
//     (DeviceStaging::chunk_bytes): the copies of every chunk to the host are queued at once,
//     the algorithm runs on chunk k as soon as its copy has landed, and chunk k's copy back is
//     queued at once, so the copies off and onto the device overlap the host's work on the
//     other chunks (what gloo does for CUDA tensors, in chunks);
//  3. the other collectives (all-gather, reduce-scatter, gather, scatter, all-to-all, whose
//     blocks are laid out by rank) and send/recv copy their whole input, run, and copy their
//     whole output back;
//  4. the call is done, and its Work completes, when the copies back have landed.
// Only the ranks whose data a call reads copy to the host (a broadcast's root, a scatter's
// root), and only those whose data it writes copy back.
//
// The chunks of one call run in the same algorithm context (sequence number, message tags).
// Every rank cuts a call into the same chunks (from the count alone) and sends and receives
// chunk k's messages before chunk k + 1's; every transport matches the messages of one
// (peer, tag) in the order they were sent (the argument of Note [MPI tags]), so a chunk never
// takes another chunk's message.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/backend.h"
#include "backends/device_staging.h"

namespace cohort {

class StagingBackend final : public CollectiveBackend {
 public:
  // `host` runs the calls in host memory (cohort's algorithms); `engine`, when not null, those
  // whose plan says Algorithm::kEngine (an MPI group's own collectives).
  StagingBackend(std::shared_ptr<DeviceStaging> staging, CollectiveBackend& host,
                 CollectiveBackend* engine);

  const char* backend_name() const override { return "cohort, staged through host memory"; }
  Backend kind() const override { return Backend::kNative; }
  void run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) override;
  // Group::send and recv of device buffers: message `index` of the (peer, tag) stream.
  void send(const CollectiveCall& call, int peer, uint64_t index, algo::Context& ctx);
  void recv(const CollectiveCall& call, int peer, uint64_t index, algo::Context& ctx);

  DeviceStaging& staging() const { return *staging_; }
  // What the algorithm choice goes by for a call of `bytes`: one chunk's bytes for the calls
  // staged a chunk at a time (each chunk is a run of the algorithm).
  size_t bytes_for_choice(const CollectiveCall& call, size_t bytes) const;

 private:
  void run_in_chunks(const CollectiveCall& call, const Plan& plan, CollectiveBackend& host,
                     DeviceCopies& copies, algo::Context& ctx);
  void run_whole(const CollectiveCall& call, const Plan& plan, CollectiveBackend& host,
                 DeviceCopies& copies, algo::Context& ctx);

  std::shared_ptr<DeviceStaging> staging_;
  CollectiveBackend& host_;
  CollectiveBackend* engine_;
};

}  // namespace cohort
