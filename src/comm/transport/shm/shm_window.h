// The shared-memory window of the ranks of a group that run on one host (a node): a segment
// every one of them maps, with per-rank flags and staging slots, on which the shared-memory
// collectives (algorithms/*_shm.cc, shm_rounds.h) run without any message passing.
//
// Layout (every part cache-line aligned):
//   Header: magic, the creator's nonce, sizes, an attach counter and an abort flag;
//   per rank a control line: pid, and the counters `posted` and `reduced` (rounds done);
//   per rank two staging slots of slot_bytes (double buffering: round g uses slot g % 2).
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
#include <vector>

#include "cohort/comm/transport.h"
#include "cohort/core/deadline.h"
#include "transport/shm/shm_segment.h"

namespace cohort {

class Store;
struct ShmHeader;

// The call a rank makes in one round (Note [Call stamps] in call_stamp.h).
struct ShmRoundCall {
  uint64_t sequence = 0;  // the group's collective sequence number
  CallStamp stamp{};      // unstamped: not checked (attaching, COHORT_CHECK_CALLS=0)
};

struct ShmRankLine;

class ShmWindow {
 public:
  static constexpr int kMaxRanks = 64;
  // What groups use: one round of a shared-memory collective, small enough to stay in cache.
  static constexpr size_t kSlotBytes = 256 * 1024;

  // Collective over the ranks of one node: `rank` and `size` are local to the node, `store` is
  // the node's own view of the group's store, and `group_ranks[i]` is local rank i's rank in
  // the group (errors name those). Returns null on every rank of the node when its local rank
  // 0 cannot make the segment (it logs why; the group then stays on TCP). Throws ConfigError
  // when another rank cannot map it, TimeoutError when a rank does not attach by the deadline.
  static std::unique_ptr<ShmWindow> create(Store& store, int rank, int size,
                                           std::vector<int> group_ranks,
                                           const std::string& job_token, size_t slot_bytes,
                                           Deadline deadline);
  ~ShmWindow();

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t slot_bytes() const { return slot_bytes_; }
  uint8_t* slot(int rank, uint64_t round) const;

  // The next round number of this rank (every rank counts the same rounds).
  uint64_t next_round() { return round_++; }
  // Publishes that this rank finished writing its slot of `round`, and waits until every rank
  // has. Note [Slot reuse] in algorithms/shm_rounds.h says why one wait per round suffices.
  // Every rank that posts a stamped `call` checks that the others posted the same one, and
  // throws MismatchError when not.
  void post_and_wait(uint64_t round, const ShmRoundCall& call, Deadline deadline,
                     const char* what);
  void post_and_wait(uint64_t round, Deadline deadline, const char* what);  // unstamped

  // Makes every rank's pending and later waits throw `error` (as the TCP transport relays an
  // abort: same type, "rank R aborted the group: ..."). The first abort wins. Never throws.
  void abort(std::exception_ptr error) noexcept;

 private:
  ShmWindow(ShmSegment segment, int rank, int size, std::vector<int> group_ranks,
            size_t slot_bytes);
  void check_alive(Deadline deadline, const char* what) const;
  void rethrow_if_aborted() const;  // the error a rank stored with abort(), if any
  void check_same_call(uint64_t round, const ShmRoundCall& mine) const;

  ShmSegment segment_;
  int rank_;
  int size_;
  std::vector<int> group_ranks_;
  size_t slot_bytes_;
  ShmHeader* header_;
  ShmRankLine* lines_;
  uint8_t* slots_;
  uint64_t round_ = 0;
};

}  // namespace cohort
