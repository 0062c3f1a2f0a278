// What an algorithm sees of the world (docs/architecture.md, "Layers"): its rank, the group size,
// and tagged send/recv over a transport, all bounded by the collective's deadline.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/step.h"
#include "cohort/comm/transport.h"
#include "cohort/core/dtype.h"
#include "transport/call_stamp.h"

namespace cohort {
class ShmWindow;
class Topology;
struct ShmPlace;
}  // namespace cohort

namespace cohort {
class RegisteredMemory;  // cohort/comm/registered_memory.h

// The registered memory (Buffer::registered) a call's input and output lie in; null where not.
struct RegisteredPair {
  const RegisteredMemory* in = nullptr;
  const RegisteredMemory* out = nullptr;
};
}  // namespace cohort

namespace cohort::algo {

class Context {
 public:
  Context(Transport& transport, uint64_t sequence, Deadline deadline, std::vector<uint8_t>& scratch,
          ShmWindow* shm = nullptr, const Topology* topology = nullptr, CallStamp stamp = {})
      : transport_(transport),
        sequence_(sequence),
        stamp_(stamp),
        deadline_(deadline),
        scratch_(scratch),
        shm_(shm),
        topology_(topology) {}

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  Deadline deadline() const { return deadline_; }
  uint64_t sequence() const { return sequence_; }
  Transport& transport() const { return transport_; }
  // The shared memory window of this rank's node (its local ranks), else null.
  ShmWindow* shm() const { return shm_; }
  // Which ranks share a node; null where the group does not know (algorithms that need it are
  // only chosen when it is known).
  const Topology* topology() const { return topology_; }
  // The registered memory the call's buffers lie in (Buffer::registered): what RegisteredView
  // runs in place on. Set by the backend for the call it runs.
  const RegisteredPair& registered() const { return registered_; }
  void set_registered(const RegisteredPair& registered) { registered_ = registered; }

  // The same collective (sequence number, deadline, scratch) over another transport, for a
  // phase that runs among some of the ranks (transport/rank_subset_transport.h).
  Context over(Transport& transport) const {
    return Context(transport, sequence_, deadline_, scratch_, nullptr, nullptr, stamp_);
  }

  // The call every message of this collective is stamped with (Note [Call stamps]).
  const CallStamp& stamp() const { return stamp_; }
  // Posts this rank's part of shared-memory round `round` and waits for the others'; throws
  // MismatchError when a local rank is in another call (Note [Call stamps]).
  void post_shm_round(uint64_t round, const char* what);
  // The same, saying where this rank's buffer is (Note [Registered buffers]).
  void post_shm_round(uint64_t round, const char* what, const ShmPlace& place);

  // `step` tells apart the messages of one collective between the same two ranks
  // (Note [Message steps]).
  std::unique_ptr<Request> isend(int peer, Step step, const void* data, size_t bytes) {
    return transport_.isend(peer, tag(step), data, bytes, deadline_);
  }
  std::unique_ptr<Request> irecv(int peer, Step step, void* data, size_t bytes) {
    return transport_.irecv(peer, tag(step), data, bytes, deadline_);
  }
  // Receives count elements and combines them into `accumulate` (Transport::irecv_reduce).
  std::unique_ptr<Request> irecv_reduce(int peer, Step step, void* accumulate, size_t count,
                                        DType dtype, ReduceOp op) {
    return transport_.irecv_reduce(peer, tag(step), accumulate, count, dtype, op, deadline_);
  }
  void send(int peer, Step step, const void* data, size_t bytes) {
    isend(peer, step, data, bytes)->wait();
  }
  void recv(int peer, Step step, void* data, size_t bytes) {
    irecv(peer, step, data, bytes)->wait();
  }
  // Group::send/recv: message `index` of this (peer, tag) stream (the context's channel).
  void send_message(int peer, uint64_t index, const void* data, size_t bytes) {
    transport_.isend(peer, Tag{sequence_, index}, data, bytes, deadline_)->wait();
  }
  void recv_message(int peer, uint64_t index, void* data, size_t bytes) {
    transport_.irecv(peer, Tag{sequence_, index}, data, bytes, deadline_)->wait();
  }

  // Scratch memory owned by the group and reused across collectives (grown, never shrunk).
  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

 private:
  Tag tag(Step step) const { return Tag{sequence_, wire_step(step), stamp_.wire()}; }

  Transport& transport_;
  uint64_t sequence_;  // a collective's sequence number, or a p2p channel
  CallStamp stamp_;
  Deadline deadline_;
  std::vector<uint8_t>& scratch_;
  ShmWindow* shm_;
  RegisteredPair registered_;
  const Topology* topology_;
};

// Waits for every request in order; the first failure propagates.
inline void wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

}  // namespace cohort::algo
