// A transport moves tagged bytes between the ranks of one group. It knows nothing of
// algorithms (docs/architecture.md): algorithms see only rank, size and tagged send/recv.
//
// Contract every transport keeps:
//  - messages are matched by (peer, tag); two messages with the same (peer, tag) arrive in the
//    order they were sent;
//  - a receive names the exact byte count; a message of another size is a ProtocolError;
//  - every request has a deadline and throws TimeoutError when it passes;
//  - when a peer dies or closes, pending and later requests involving it throw PeerError
//    naming it, promptly (not at the deadline);
//  - abort() fails everything pending and tells the peers, which fail with the same error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "cohort/core/deadline.h"
#include "cohort/core/dtype.h"

namespace cohort {

class Store;

// What a collective's message says about the call that sent it, so that a receiver can tell
// that the ranks are out of step before it touches the payload (Note [Call stamps] in
// src/comm/call_stamp.h). Its layout is the comm layer's own (CallStamp,
// src/comm/transport/call_stamp.h): a transport carries these 16 bytes beside the tag and hands
// them to the receiver unchanged. All zero: unstamped (point-to-point messages, a group's
// set-up), never checked.
struct WireStamp {
  uint64_t words[2] = {0, 0};
};

// Collective messages use (sequence number, step); point-to-point ones use a separate space
// so that ranks not taking part in a send/recv keep their collective sequence numbers aligned.
struct Tag {
  uint64_t channel = 0;  // collective sequence number, or kP2PChannelBit | user tag
  uint64_t step = 0;     // message index within the collective or the p2p stream
  WireStamp stamp{};     // the collective's call; not compared by == or <
  bool operator==(const Tag& o) const { return channel == o.channel && step == o.step; }
  bool operator<(const Tag& o) const {
    return channel != o.channel ? channel < o.channel : step < o.step;
  }
};
inline constexpr uint64_t kP2PChannelBit = 1ULL << 63;

class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer is done; throws TimeoutError, PeerError or ProtocolError.
  virtual void wait() = 0;
};

// Who a subgroup is, for Transport::split.
struct SplitSpec {
  // The members' ranks in the parent, in the subgroup's rank order; this rank is one of them.
  std::vector<int> members;
  // The same on every member, unique per subgroup of the parent.
  std::string key;
  // The subgroup's own view of the store (address exchange); null for a group without one
  // (MPI, whose communicator splits by itself).
  std::shared_ptr<Store> store;
  Deadline deadline;

  int new_size() const { return static_cast<int>(members.size()); }
  // This rank's rank in the subgroup, from its rank in the parent.
  int new_rank(int parent_rank) const;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // A short word for logs and errors: "inproc", "tcp", ...
  virtual const char* name() const = 0;

  // Buffers must stay valid until the returned request's wait() returns.
  virtual std::unique_ptr<Request> isend(int peer, Tag tag, const void* data, size_t bytes,
                                         Deadline deadline) = 0;
  virtual std::unique_ptr<Request> irecv(int peer, Tag tag, void* data, size_t bytes,
                                         Deadline deadline) = 0;
  // Receives `count` elements and combines them into `accumulate`: acc[i] = op(acc[i], in[i])
  // (kAvg combines as a sum). Transports that can do it as the bytes arrive override this; the
  // default receives into a temporary buffer and combines in wait().
  virtual std::unique_ptr<Request> irecv_reduce(int peer, Tag tag, void* accumulate, size_t count,
                                                DType dtype, ReduceOp op, Deadline deadline);

  // Fails every pending and future request with `error` and tells the peers (best effort).
  virtual void abort(std::exception_ptr error) noexcept = 0;

  // The transport of a subgroup (Group::split), called by its members only (SplitSpec).
  virtual std::unique_ptr<Transport> split(const SplitSpec& spec) = 0;
};

// A request that is already complete (sends that finished inside isend).
class CompletedRequest final : public Request {
 public:
  void wait() override {}
};

}  // namespace cohort
