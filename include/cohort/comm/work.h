// A handle on an asynchronous collective. The collective runs on the group's worker thread;
// its exception is stored here and rethrown from wait() (docs/architecture.md: no exception dies in a
// background thread).
#pragma once

#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>

#include "cohort/core/deadline.h"

namespace cohort {

class Work {
 public:
  explicit Work(std::string description) : description_(std::move(description)) {}

  bool is_completed() const;
  // Blocks until the collective finished and rethrows its error. The collective has its own
  // deadline (the group's timeout), so this returns or throws by then.
  void wait() const;
  // As wait(), but throws TimeoutError if the collective is still running after `timeout`;
  // the collective itself keeps running to its own deadline.
  void wait(Milliseconds timeout) const;
  // What the collective was, for messages: "allreduce #12 (4096 x float32, sum)".
  const std::string& description() const { return description_; }
  // When the group's communication thread began and finished running it (for timelines and
  // per-bucket latencies); default-constructed until then.
  Clock::time_point started_at() const;
  Clock::time_point finished_at() const;

  // Called by the group.
  void mark_started();
  void mark_done(std::exception_ptr error = nullptr);

 private:
  std::string description_;
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
  Clock::time_point started_at_{};
  Clock::time_point finished_at_{};
};

}  // namespace cohort
