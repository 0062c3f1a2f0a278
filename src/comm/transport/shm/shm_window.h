// The shared-memory window of a group whose ranks all run on one host: a segment every rank
// maps, with per-rank flags and staging slots, on which the shared-memory collectives
// (algorithms/allreduce_shm.cc) run without any message passing.
//
// Layout (every part cache-line aligned):
//   Header: magic, the creator's nonce, sizes, an attach counter and an abort flag;
//   per rank a control line: pid, and the counters `posted` and `reduced` (rounds done);
//   per rank two staging slots of slot_bytes (double buffering: round g uses slot g % 2);
//   two result areas of slot_bytes.
//
// Note [Shared-memory lifetime]
// Rank 0 creates the segment under a name derived from the job token and a fresh nonce
// (O_EXCL, mode 0600) and publishes the name in the group's store; the others map it. The
// last rank to attach removes the name at once, so from then on nothing is left in /dev/shm
// however the processes end (exit, exception, SIGKILL): the kernel frees the memory with the
// last mapping. Only a rank killed between creation and the last attach can leave a name
// behind; rank 0 removes it when attaching times out. Another job never finds the segment:
// it has another name, and the nonce in the header must match the one in the store.
//
// Note [Shared-memory waits]
// A wait spins briefly (a peer usually answers within a microsecond), then yields the CPU
// between polls so that oversubscribed ranks make progress. Every few milliseconds it checks
// the deadline, the abort flag (set by any rank's Group::abort) and whether each peer process
// still exists, so a dead peer is a PeerError naming it within milliseconds.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>

#include "cohort/core/deadline.h"
#include "transport/shm/shm_segment.h"

namespace cohort {

class Store;
struct ShmHeader;
struct ShmRankLine;

class ShmWindow {
 public:
  static constexpr int kMaxRanks = 64;

  // Collective over the group's ranks (all on this host). Returns null on every rank when rank
  // 0 cannot make the segment (it logs why; the group then stays on TCP). Throws ConfigError
  // when another rank cannot map it, TimeoutError when a rank does not attach by the deadline.
  static std::unique_ptr<ShmWindow> create(Store& store, int rank, int size,
                                           const std::string& job_token, size_t slot_bytes,
                                           Deadline deadline);
  ~ShmWindow();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(int rank, uint64_t round) const;
  uint8_t* result(uint64_t round) const;

  // The next round number of this rank (every rank counts the same rounds).
  uint64_t next_round() { return round_++; }
  // Publishes that this rank finished the copy-in (`posted`) or the reduction (`reduced`) of
  // `round`, and waits until every rank has.
  void post_and_wait(uint64_t round, Deadline deadline, const char* what);
  void reduced_and_wait(uint64_t round, Deadline deadline, const char* what);

  // Makes every rank's pending and later waits throw `error` (as the TCP transport relays an
  // abort: same type, "rank R aborted the group: ..."). The first abort wins. Never throws.
  void abort(std::exception_ptr error) noexcept;

 private:
  ShmWindow(ShmSegment segment, int rank, int size, size_t slot_bytes);
  void publish_and_wait(std::atomic<uint64_t> ShmRankLine::*counter, uint64_t round,
                        Deadline deadline, const char* what);
  void check_alive(Deadline deadline, const char* what) const;

  ShmSegment segment_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  ShmHeader* header_;
  ShmRankLine* lines_;
  uint8_t* slots_;
  uint8_t* results_;
  uint64_t round_ = 0;
};

// Whether every rank of a group runs on this host with the same view of processes and shared
// memory (same boot, same PID, IPC and network namespaces): then shared memory can carry its
// collectives. Collective over the store.
bool all_ranks_share_this_host(Store& store, int rank, int size, Deadline deadline);

}  // namespace cohort
