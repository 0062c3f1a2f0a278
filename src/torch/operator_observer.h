// The operator interception FSDP runs on (Note [FSDP interception] in shard/fsdp.cc): a
// RecordFunction observer, on the thread that registered a watcher (and the autograd threads
// running that thread's backward), that reports every operator reading a unit's storage and
// every backward node about to run.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/StorageImpl.h>

#include <cstdint>
#include <vector>

namespace cohort {

class UnitWatcher {
 public:
  virtual ~UnitWatcher() = default;
  // The unit whose flat storage `storage` is, or -1.
  virtual int unit_of(const c10::StorageImpl* storage) const = 0;
  // Before a forward-time operator reading `units` (distinct, ascending) runs.
  virtual void before_operator(const std::vector<int>& units) = 0;
  // After it ran; the autograd nodes it created have sequence numbers [first, end).
  virtual void after_operator(const std::vector<int>& units, int64_t first, int64_t end) = 0;
  // Before the backward node with sequence number `seq`, created on the watcher's thread, runs.
  virtual void before_backward_node(int64_t seq) = 0;
};

// Starts/stops reporting to `watcher` the operators of the calling thread. Exceptions thrown
// by the watcher are swallowed by RecordFunction (with a warning): the watcher must keep
// its own errors and raise them later.
void watch_operators(UnitWatcher* watcher);
void unwatch_operators(UnitWatcher* watcher);

// Whether some registered watcher, on any thread, has `storage` as a unit's flat storage (a
// parameter over it belongs to a FullyShardedDataParallel).
bool storage_is_watched(const c10::StorageImpl* storage);

// While alive on a thread, that thread's operators are not reported (the watcher's own work).
class UnwatchedScope {
 public:
  UnwatchedScope();
  ~UnwatchedScope();
  UnwatchedScope(const UnwatchedScope&) = delete;
  UnwatchedScope& operator=(const UnwatchedScope&) = delete;

 private:
  bool was_;
};

}  // namespace cohort
