// How an error crosses processes in abort messages (a wire detail of the transports).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

namespace cohort {

// Carries an error across processes in abort messages: the kind survives the trip, so a
// timeout on one rank is a TimeoutError on every rank.
struct WireError {
  enum Kind : uint8_t {
    kGeneric = 0,
    kTimeout = 1,
    kPeer = 2,
    kProtocol = 3,
    kInvalid = 4,
    kStore = 5,
    kConfig = 6,
    kMismatch = 7
  };
  static constexpr uint8_t kLastKind = kMismatch;
  Kind kind = kGeneric;
  int32_t failed_rank = -1;
  std::string message;

  static WireError from(std::exception_ptr error);
  // A byte string for abort messages (kind, rank, message cut to kMaxEncodedBytes in all);
  // decode throws ProtocolError for one that is malformed.
  static constexpr size_t kMaxEncodedBytes = 64 * 1024;
  std::string encode() const;
  static WireError decode(const std::string& payload);
  // Whether an error message already came from another rank ("rank N aborted the group: ...").
  static bool is_relayed(const std::string& message);
  // Throws the error this describes, saying which rank reported it.
  [[noreturn]] void rethrow(int reporting_rank) const;
  std::exception_ptr as_exception(int reporting_rank) const;
};

}  // namespace cohort
