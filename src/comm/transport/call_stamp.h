// Call stamps: how a rank tells, from a peer's message, that the peer is running another
// collective than it is. The layout of a stamp is here; public code sees it only as
// WireStamp's 16 bytes.
//
// Note [Call stamps]
// The most common distributed bug is ranks out of step: one rank calls allreduce while another
// calls allgather, or both call allreduce with different counts or broadcast with different
// roots. Messages of equal size then carry the wrong data and nothing fails. So every message
// of a collective carries a CallStamp (collective, count, dtype, op, root; the channel or the
// shared-memory round carries the sequence number), and a receiver compares it with its own
// call before it touches the payload:
//  - TCP: the stamp rides in the frame header; the reader compares it with every receive posted
//    for the same collective (any step), and a receive compares it with every message already
//    buffered for the same collective, so a mismatch is caught however the two algorithms
//    number their messages;
//  - shared memory: each rank writes its stamp and sequence number beside the round counter it
//    posts, and every rank compares all of them once the round is complete;
//  - MPI: MPI matches messages itself, and a collective of the wrong size or kind is undefined
//    there (truncation errors, or an abort on MPI_COMM_WORLD), so the group first allreduces a
//    fingerprint of the call through the engine and compares (16 bytes, one small MPI_Allreduce
//    per collective), and only then runs the collective.
// The rank that sees the mismatch throws MismatchError naming both calls and both ranks; its
// group aborts and relays the same error to every other rank. COHORT_CHECK_CALLS=0 turns the
// stamps off. COHORT_DEBUG=detail still compares every call through the store before it starts,
// which also names calls that never meet (a rank that skipped a collective altogether).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "cohort/comm/options.h"
#include "cohort/comm/transport.h"
#include "cohort/core/error.h"

namespace cohort {

// What a collective's messages say about the call that sent them, so that a receiver can tell
// that the ranks are out of step before it touches the payload (Note [Call stamps]
// above). Not part of message matching. kind == 0: unstamped (point-to-point
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

CallStamp make_stamp(CollectiveKind kind, size_t count, DType dtype, ReduceOp op, int root,
                     CallSite site);

// "allreduce(count=1024, dtype=float32, op=sum)": the parts of a call that must agree.
std::string describe_call(const CallStamp& stamp);
// The same, then " in DistributedDataParallel's constructor" where cohort issued it.
std::string describe_call_and_site(const CallStamp& stamp);

// The error when rank `mine_rank` made call `mine` as its collective #mine_sequence and rank
// `theirs_rank` made call `theirs` as its collective #theirs_sequence (the same number, unless
// one of them skipped or added a collective that did not meet the other).
MismatchError call_mismatch(uint64_t mine_sequence, int mine_rank, const CallStamp& mine,
                            uint64_t theirs_sequence, int theirs_rank, const CallStamp& theirs);

// A 64-bit fingerprint of (sequence, call) for the engine's check (MPI): equal on every rank
// that makes the same call at the same point, the site left out.
uint64_t call_fingerprint(uint64_t sequence, const CallStamp& stamp);

}  // namespace cohort
