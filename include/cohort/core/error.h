// Typed exceptions of the public API (docs/architecture.md, "Conventions").
//
// Every error cohort throws derives from cohort::Error, so callers can catch one type; the
// subclasses say what kind of failure it was so that callers can react (retry a StoreError,
// restart after a PeerError, fix their arguments after an InvalidArgument).
#pragma once

#include <stdexcept>
#include <string>

namespace cohort {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The caller passed something wrong (bad count, dtype, rank, mismatched call across ranks).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Ranks called different collectives at the same point (another collective, count, dtype, op
// or root): "collectives out of step". Every rank throws it, naming both calls and both ranks.
class MismatchError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A deadline passed. The message names the operation and, for collectives, the missing ranks.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer rank failed: its process died, it closed its connection, or it sent garbage.
class PeerError : public Error {
 public:
  PeerError(int failed_rank, const std::string& what) : Error(what), failed_rank_(failed_rank) {}
  // The rank that failed, or -1 when it is not known.
  int failed_rank() const noexcept { return failed_rank_; }

 private:
  int failed_rank_;
};

// The environment or configuration is inconsistent (a malformed or missing variable).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The rendezvous store failed: unreachable, refused our token, or lost its connection.
class StoreError : public Error {
 public:
  using Error::Error;
};

// Bytes on a connection did not follow cohort's wire format (a malformed or oversized frame).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A training checkpoint could not be written, or could not be loaded: unreadable, corrupt or
// truncated, or saved from a different model. The message names the file and what to do.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace cohort
