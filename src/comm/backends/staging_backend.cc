#include "backends/staging_backend.h"

#include <algorithm>
#include <utility>

#include "algorithms/context.h"
#include "cohort/core/check.h"

namespace cohort {

namespace {

bool staged_in_chunks(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kReduce;
}

// Whether this rank's data is read by an elementwise call (copied to the host) and written by
// it (copied back).
struct Directions {
  bool to_host = true;
  bool to_device = true;
};

Directions elementwise_directions(const CollectiveCall& call, int rank) {
  const bool root = rank == call.root;
  switch (call.kind) {
    case CollectiveKind::kBroadcast: return {root, !root};
    case CollectiveKind::kReduce: return {true, root};
    default: return {};
  }
}

// The bytes of a rank-blocked call's input and output on this rank (group_collectives.cc says
// what `count` counts for each kind).
struct Extents {
  size_t in = 0;
  size_t out = 0;
};

Extents blocked_extents(const CollectiveCall& call, int rank, int size) {
  const size_t bytes = call.bytes();
  const size_t all = bytes * static_cast<size_t>(size);
  const bool root = rank == call.root;
  switch (call.kind) {
    case CollectiveKind::kAllgather: return {bytes, all};
    case CollectiveKind::kReduceScatter: return {all, bytes};
    case CollectiveKind::kGather: return {bytes, root ? all : 0};
    case CollectiveKind::kScatter: return {root ? all : 0, bytes};
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kRingShift: return {bytes, bytes};
    default: break;
  }
  COHORT_INTERNAL_ASSERT(false, call.describe(), " is not staged as a whole");
  return {};
}

CollectiveCall in_host_memory(CollectiveCall call, const void* in, void* out, size_t count) {
  call.in = in;
  call.out = out;
  call.count = count;
  call.device = kHostMemory;
  call.stream = nullptr;
  return call;
}

}  // namespace

StagingBackend::StagingBackend(std::shared_ptr<DeviceStaging> staging, CollectiveBackend& host,
                               CollectiveBackend* engine)
    : staging_(std::move(staging)), host_(host), engine_(engine) {
  COHORT_INTERNAL_ASSERT(staging_ != nullptr, "StagingBackend without a DeviceStaging");
}

size_t StagingBackend::bytes_for_choice(const CollectiveCall& call, size_t bytes) const {
  return staged_in_chunks(call.kind) ? std::min(bytes, staging_->chunk_bytes()) : bytes;
}

void StagingBackend::run(const CollectiveCall& call, const Plan& plan, algo::Context& ctx) {
  CollectiveBackend& host = plan.algorithm == Algorithm::kEngine && engine_ != nullptr
                                ? *engine_
                                : host_;
  const auto copies = staging_->begin(call.device, call.stream);
  if (staged_in_chunks(call.kind)) {
    run_in_chunks(call, plan, host, *copies, ctx);
  } else {
    run_whole(call, plan, host, *copies, ctx);
  }
  copies->wait_to_device(ctx.deadline());
}

// Note [Staged device buffers], step 2.
void StagingBackend::run_in_chunks(const CollectiveCall& call, const Plan& plan,
                                   CollectiveBackend& host, DeviceCopies& copies,
                                   algo::Context& ctx) {
  const size_t element = dtype_size(call.dtype);
  const size_t per_chunk = std::max<size_t>(1, staging_->chunk_bytes() / element);
  const size_t chunks = (call.count + per_chunk - 1) / per_chunk;
  uint8_t* area = staging_->host_area(call.bytes());
  const auto* in = static_cast<const uint8_t*>(call.in);
  auto* out = static_cast<uint8_t*>(call.out);
  const Directions copy = elementwise_directions(call, ctx.rank());
  const auto chunk_count = [&](size_t k) { return std::min(per_chunk, call.count - k * per_chunk); };
  if (copy.to_host) {
    for (size_t k = 0; k < chunks; ++k) {
      const size_t offset = k * per_chunk * element;
      copies.to_host(area + offset, in + offset, chunk_count(k) * element);
    }
  }
  for (size_t k = 0; k < chunks; ++k) {
    const size_t offset = k * per_chunk * element;
    const size_t count = chunk_count(k);
    if (copy.to_host) copies.wait_to_host(k + 1, ctx.deadline());
    host.run(in_host_memory(call, area + offset, area + offset, count), plan, ctx);
    if (copy.to_device) copies.to_device(out + offset, area + offset, count * element);
  }
}

// Note [Staged device buffers], step 3.
void StagingBackend::run_whole(const CollectiveCall& call, const Plan& plan,
                               CollectiveBackend& host, DeviceCopies& copies, algo::Context& ctx) {
  const Extents extents = blocked_extents(call, ctx.rank(), ctx.size());
  uint8_t* area = staging_->host_area(extents.in + extents.out);
  uint8_t* host_in = extents.in > 0 ? area : nullptr;
  uint8_t* host_out = extents.out > 0 ? area + extents.in : nullptr;
  if (host_in != nullptr) {
    copies.to_host(host_in, call.in, extents.in);
    copies.wait_to_host(1, ctx.deadline());
  }
  host.run(in_host_memory(call, host_in, host_out, call.count), plan, ctx);
  if (host_out != nullptr) copies.to_device(call.out, host_out, extents.out);
}

void StagingBackend::send(const CollectiveCall& call, int peer, uint64_t index,
                          algo::Context& ctx) {
  const auto copies = staging_->begin(call.device, call.stream);
  uint8_t* area = staging_->host_area(call.bytes());
  if (call.bytes() > 0) {
    copies->to_host(area, call.in, call.bytes());
    copies->wait_to_host(1, ctx.deadline());
  }
  ctx.send_message(peer, index, area, call.bytes());
}

void StagingBackend::recv(const CollectiveCall& call, int peer, uint64_t index,
                          algo::Context& ctx) {
  const auto copies = staging_->begin(call.device, call.stream);
  uint8_t* area = staging_->host_area(call.bytes());
  ctx.recv_message(peer, index, area, call.bytes());
  if (call.bytes() > 0) copies->to_device(call.out, area, call.bytes());
  copies->wait_to_device(ctx.deadline());
}

}  // namespace cohort
