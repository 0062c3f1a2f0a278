// The layout of a call stamp, the part of a collective's message that says which call sent it
// (Note [Call stamps] in call_stamp.h). Public code sees it only as WireStamp's 16 bytes.
#pragma once

#include <cstdint>
#include <cstring>

#include "cohort/comm/transport.h"

namespace cohort {

// What a collective's messages say about the call that sent them, so that a receiver can tell
// that the ranks are out of step before it touches the payload (Note [Call stamps] in
// src/comm/call_stamp.h). Not part of message matching. kind == 0: unstamped (point-to-point
// messages, a group's set-up), never checked.
struct CallStamp {
  uint64_t count = 0;
  int32_t root = 0;
  uint8_t kind = 0;   // CollectiveKind + 1
  uint8_t dtype = 0;  // DType
  uint8_t op = 0;     // ReduceOp
  uint8_t site = 0;   // CallSite: named in errors, not compared
  bool stamped() const { return kind != 0; }

  // The stamp a message carries, and back.
  static CallStamp of(const WireStamp& wire) {
    CallStamp stamp;
    std::memcpy(static_cast<void*>(&stamp), &wire, sizeof stamp);
    return stamp;
  }
  WireStamp wire() const {
    WireStamp out;
    std::memcpy(static_cast<void*>(&out), this, sizeof out);
    return out;
  }
  // Whether two ranks made the same call (the site does not count).
  bool same_call(const CallStamp& o) const {
    return count == o.count && root == o.root && kind == o.kind && dtype == o.dtype && op == o.op;
  }
};
static_assert(sizeof(CallStamp) == 16, "CallStamp travels in frame headers and shm lines");
static_assert(sizeof(CallStamp) == sizeof(WireStamp), "a CallStamp travels as a WireStamp");

// The call stamped on a message's tag.
inline CallStamp stamp_of(const Tag& tag) {
  return CallStamp::of(tag.stamp);
}

}  // namespace cohort
