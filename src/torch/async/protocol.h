// The messages between a parameter server and one of its clients (Note [Parameter server
// protocol]), over the two-rank group of the pair (pair_groups.h).
//
// Note [Parameter server protocol]
// Every exchange is started by the client and answered by the server, in order, on the pair's
// own group (so a pair whose peer dies fails alone):
//   client -> server  Header{kPull}                        the first parameters
//   client -> server  Header{kPush, computed_on, clock, weight} + the gradient of the server's
//                     shard (with hybrid, the mean of `weight` workers' gradients)
//   client -> server  Header{kDone}                        no more gradients
//   server -> client  Header{kParameters, version} + the shard's parameters, once per request;
//                     for kPush when the consistency rule lets the client go on
//                     (server_shard.h), for kDone when every client is done.
// Headers travel on kHeaderTag and payloads on kPayloadTag; both sizes are known to both
// sides, since a payload is always the whole shard in the model's dtype.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cohort/comm/group.h"

namespace cohort::ps {

enum class MessageKind : int64_t { kPull = 1, kPush = 2, kDone = 3, kParameters = 4 };

struct Header {
  MessageKind kind = MessageKind::kPull;
  int64_t computed_on = 0;  // kPush: the version of the parameters the gradient came from
  int64_t clock = 0;        // kPush: how many gradients this client pushed before this one
  int64_t version = 0;      // kParameters: the version of the parameters that follow
  int64_t weight = 1;       // kPush: how many workers' gradients the pushed one averages
};
static_assert(sizeof(Header) == 5 * sizeof(int64_t), "headers travel as five int64");

// How a server's staleness timeout opens: the server aborts the pair with that message, and
// the worker throws it as a TimeoutError (not as the server's failure).
inline constexpr const char* kHeldUp = "parameter server held up";

inline constexpr uint32_t kHeaderTag = 1;
inline constexpr uint32_t kPayloadTag = 2;

inline constexpr size_t kHeaderWords = sizeof(Header) / sizeof(int64_t);
inline ConstBuffer header_buffer(const Header& header) {
  return ConstBuffer(&header, kHeaderWords, DType::kInt64);
}
inline Buffer header_buffer(Header& header) { return Buffer{&header, kHeaderWords, DType::kInt64}; }

// Note [Held-up deadlines]: a straggler is dropped `timeout` after the server last heard from
// it, which may be about when another worker's wait for the step it holds up begins. That wait
// lasts a grace period longer, so that the drop, and the steps going on without it, come
// first however the threads are scheduled; a worker waits one more grace period for the reply,
// so that the server's explanation comes before its own timeout.
inline Milliseconds grace_period(Milliseconds timeout) {
  return std::max(Milliseconds(1000), timeout / 10);
}
inline Milliseconds held_up_deadline(Milliseconds timeout) {
  return timeout + grace_period(timeout);
}
inline Milliseconds reply_deadline(Milliseconds timeout) {
  return held_up_deadline(timeout) + grace_period(timeout);
}

inline CollectiveOptions on_tag(uint32_t tag, Milliseconds timeout) {
  CollectiveOptions options;
  options.tag = tag;
  options.timeout = timeout;
  return options;
}

}  // namespace cohort::ps
