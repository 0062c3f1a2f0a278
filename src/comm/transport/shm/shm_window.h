// The shared-memory window of the ranks of a group that run on one host (a node): a segment
// every one of them maps, with per-rank flags and staging slots, on which the shared-memory
// collectives (algorithms/*_shm.cc, shm_rounds.h) run without any message passing.
//
// Layout (every part cache-line aligned):
//   Header: magic, the creator's nonce, sizes, an attach counter and an abort flag;
//   per rank three control lines: the counter `posted` (rounds done) with the round's call and
//   where its buffer is (Note [Registered buffers] in shm_registry.h), then the pid and the
//   fields of a registration;
//   per rank two staging slots of slot_bytes (double buffering: round g uses slot g % 2).
//
// Note [Shared-memory lifetime]
// Rank 0 names the segment after the job token, its pid and a fresh nonce (all hex), publishes
// its pid and the name in the group's store, and only then creates it (O_EXCL, mode 0600),
// writes its pid into its rank line and publishes the nonce, which says the segment is ready.
// The others map it, checking the nonce against the header (another job never finds the
// segment: it has another name). The name is removed as early as it can be:
//  - by the last rank to attach, at once; from then on nothing is left in /dev/shm however the
//    processes end (the kernel frees the memory with the last mapping);
//  - by every rank that knows the name when its part of the creation ends, succeeding or
//    failing (exception, timeout, a peer seen dead): a failure on any rank removes it, and a
//    rank killed in the middle is noticed by the others (its pid is in its rank line, rank 0's
//    also in the store) within milliseconds, and they remove it;
//  - by a rank ended meanwhile by SIGTERM, SIGINT or SIGHUP: while it knows the name, a
//    handler removes it before the signal ends the process (ShmNameGuard; only where the
//    program left those signals at their default action).
// What is left: a name whose every rank is killed by SIGKILL (or ends by a signal the program
// handles itself) between creation and the last attach. Launchers remove those: the name holds
// the creator's pid.
// Note [Shared-memory waits]
// A wait spins briefly (a peer usually answers within a microsecond), then yields the CPU
// between polls so that oversubscribed ranks make progress. When the node has more ranks than
// this process may run on CPUs (16 ranks on 2 cores), it yields from the first poll: the peer
// it waits for is then most likely descheduled, and a spin only holds the CPU that peer needs
// (16 ranks on 2 cores spun through every round, and lost to loopback TCP's blocking waits). Every
// few milliseconds it checks the deadline, the abort flag (set by any rank's Group::abort) and
// whether each peer process still exists, so a dead peer is a PeerError naming it within
// milliseconds.
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
#include "transport/call_stamp.h"
#include "transport/shm/shm_segment.h"

namespace cohort {

class Store;
class ShmRegistry;
struct ShmHeader;

// The call a rank makes in one round (Note [Call stamps] in transport/call_stamp.h).
struct ShmRoundCall {
  uint64_t sequence = 0;  // the group's collective sequence number
  CallStamp stamp{};      // unstamped: not checked (attaching, COHORT_CHECK_CALLS=0)
};

// Where a rank's buffer of a round is: `region` of the node's registered memory (0: private
// memory, read by no peer) at `offset` bytes into this rank's copy. Every rank of a round
// must post the same region (Note [Registered buffers] in shm_registry.h).
struct ShmPlace {
  uint32_t region = 0;
  uint64_t offset = 0;
};

// What a rank offers in a registration round: its copy of the region (a descriptor its peers
// map through /proc/<pid>/fd) and, one round later, whether it mapped every peer's.
struct ShmOffer {
  uint32_t region = 0;
  int32_t fd = -1;  // -1: this rank has no copy to share
  uint64_t bytes = 0;
  int32_t mapped_all = 0;
};

struct ShmRankLine;

class ShmWindow {
 public:
  static constexpr int kMaxRanks = 64;
  // What groups use: one round of a shared-memory collective, small enough to stay in cache.
  static constexpr size_t kSlotBytes = 256 * 1024;

  // Collective over the ranks of one node: `rank` and `size` are local to the node, `store` is
  // the node's own view of the group's store, and `group_ranks[i]` is local rank i's rank in
  // the group (errors name those). `pids[i]`, when not empty, is local rank i's process as
  // the group's host exchange saw it (0: unknown); it is watched until that rank attaches, so
  // that a rank that dies before is a PeerError naming it at once instead of a timeout.
  // Returns null on every rank of the node when its local rank 0 cannot make the segment (it
  // logs why; the group then stays on TCP). Throws ConfigError when another rank cannot map
  // it, TimeoutError (naming the ranks) when a rank does not attach by the deadline.
  static std::unique_ptr<ShmWindow> create(Store& store, int rank, int size,
                                           std::vector<int> group_ranks, std::vector<pid_t> pids,
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
  // `place` is where this rank's buffer of the round is; every rank must post the same
  // region (else MismatchError on every rank), and place(r, round) tells where rank r's is.
  void post_and_wait(uint64_t round, const ShmRoundCall& call, Deadline deadline, const char* what,
                     ShmPlace place = {});
  void post_and_wait(uint64_t round, Deadline deadline, const char* what);  // unstamped
  // Rank r's place of `round`, once post_and_wait(round) has returned.
  ShmPlace place(int rank, uint64_t round) const;

  // Registration (shm_registry.cc): this rank's offer of `round`, written before it posts the
  // round, and rank r's, read after the wait (reused on the terms of Note [Slot reuse]).
  void set_offer(uint64_t round, const ShmOffer& offer);
  ShmOffer offer(int rank, uint64_t round) const;
  int pid(int rank) const;
  // The local ranks' rank in the group, for errors.
  int group_rank(int rank) const { return group_ranks_[static_cast<size_t>(rank)]; }
  // The node's registered memory (shm_registry.h); it outlives the window while any region
  // allocated through it is alive.
  ShmRegistry& registry() const { return *registry_; }

  // Tests only: called with the step's name ("joining" on every rank as it enters; "named",
  // "created", "published" on rank 0; "opened", "attached" on every rank) and the local rank as
  // create() passes each step, so that a test can end a rank exactly there. Null: none (the
  // default).
  using CreationHook = void (*)(const char* step, int rank);
  static void set_creation_hook(CreationHook hook);

  // Makes every rank's pending and later waits throw `error` (as the TCP transport relays an
  // abort: same type, "rank R aborted the group: ..."). The first abort wins. Never throws.
  void abort(std::exception_ptr error) noexcept;

 private:
  ShmWindow(ShmSegment segment, int rank, int size, std::vector<int> group_ranks,
            std::vector<pid_t> pids, size_t slot_bytes);
  void check_alive(uint64_t round, Deadline deadline, const char* what) const;
  // Rank r's process: the pid in its rank line once it has opened the window, else the one
  // create() was given (0: unknown).
  pid_t watched_pid(int rank) const;
  std::string describe_late(uint64_t round) const;  // the ranks that have not posted `round`
  void rethrow_if_aborted() const;                  // the error a rank stored with abort(), if any
  void check_same_call(uint64_t round, const ShmRoundCall& mine) const;
  void check_same_region(uint64_t round, const ShmRoundCall& call, const char* what) const;

  ShmSegment segment_;
  int rank_;
  int size_;
  std::vector<int> group_ranks_;
  std::vector<pid_t> known_pids_;  // create()'s `pids`: empty, or one per local rank
  size_t slot_bytes_;
  int spins_;  // polls before a wait yields (Note [Shared-memory waits])
  ShmHeader* header_;
  ShmRankLine* lines_;
  uint8_t* slots_;
  uint64_t round_ = 0;
  std::shared_ptr<ShmRegistry> registry_;
};

}  // namespace cohort
