// Note [Stall reports]: how a timeout names the ranks that never joined a collective without
// the store hearing from anyone while training runs normally.
//
// Each rank's group has one StallReporter. It is woken every period() (a tenth of the group's
// timeout, between 20 ms and 1 s) by the process's stall watcher (one thread for every group:
// Note [One stall watcher]) and looks at the collective this rank has in flight:
// when the same collective has been in flight for a whole period, the rank is stalled in it
// and publishes "stalled/<rank>" = its sequence number to the group's store; when a published
// stall is over, it deletes the key. A loop of collectives that each finish within a period
// (steady training) therefore makes no store traffic at all.
//
// A rank whose collective times out waits settle() (two periods and a margin), so that every
// rank that had joined the collective before the timeout has had a whole period to publish,
// then reads every other rank's key: a rank stalled in this collective (or a later one) joined
// it; any other rank never did, and the message says where it was: stalled in an earlier
// collective, or in none of this group's (computing, frozen, or gone).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/store.h"
#include "cohort/core/deadline.h"
#include "group/stall_watcher.h"

namespace cohort {

class StallReporter {
 public:
  // `timeout`: the group's default collective timeout, which sets the period.
  StallReporter(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout);
  ~StallReporter();
  StallReporter(const StallReporter&) = delete;
  StallReporter& operator=(const StallReporter&) = delete;

  // Called by the thread that runs collective `sequence`, before and after it. Cheap: two
  // relaxed atomic stores, no lock, no wake-up.
  void started(uint64_t sequence) { started_.store(int64_t(sequence), std::memory_order_relaxed); }
  void finished(uint64_t sequence) {
    finished_.store(int64_t(sequence), std::memory_order_relaxed);
  }

  // For the TimeoutError of collective `sequence` on this rank: "ranks that never joined it:
  // 2 (stalled in #4), 3 (in no collective of this group)", or that every rank joined.
  // Waits settle() first.
  std::string ranks_behind(uint64_t sequence);

  Milliseconds period() const { return period_; }
  Milliseconds settle() const { return 2 * period_ + Milliseconds(100); }

 private:
  void tick();  // on the watcher's thread, once a period
  void publish(int64_t sequence);
  void withdraw();

  std::shared_ptr<Store> store_;
  int rank_, size_;
  Milliseconds period_;
  std::atomic<int64_t> started_{-1};
  std::atomic<int64_t> finished_{-1};
  // The watcher's own (its ticks of one reporter never overlap): the collective in flight at
  // the previous tick, and the stall the store holds for this rank.
  int64_t seen_ = -1;
  int64_t published_ = -1;

  std::shared_ptr<StallWatcher> watcher_;
  uint64_t watch_id_ = 0;
};

}  // namespace cohort
