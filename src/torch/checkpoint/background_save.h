// One save running on a thread of its own (async_checkpoint.cc): the caller waits for two
// moments of it, each with a deadline, and takes its error once it has ended.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

namespace cohort::detail {

class BackgroundSave {
 public:
  using Clock = std::chrono::steady_clock;
  // The job calls `staged` once it no longer reads the training state (at most once); the
  // save counts as staged when the job ends in any case.
  using Job = std::function<void(const std::function<void()>& staged)>;

  // Starts `job` on a new thread; `staged`: whether it reads nothing of the training state
  // after the start (a rank that writes no file), so that before_update never waits on it;
  // `idle_priority`: the thread runs under SCHED_IDLE (AsyncCheckpointOptions::idle_priority).
  BackgroundSave(Job job, bool staged, bool idle_priority);
  // Joins the thread once the job has ended; a job still running (past every deadline of the
  // caller) is left to finish on its own: it holds everything it uses.
  ~BackgroundSave();
  BackgroundSave(const BackgroundSave&) = delete;
  BackgroundSave& operator=(const BackgroundSave&) = delete;

  // Puts the thread back at the normal priority (SCHED_OTHER), for the rest of the job: the
  // caller is about to wait for it, so it must not wait for idle CPU time (busy-polling peers
  // may leave none).
  void raise_priority();

  // Block until the job is staged / has ended; false when `deadline` came first.
  bool wait_staged(Clock::time_point deadline) const;
  bool wait_finished(Clock::time_point deadline) const;
  bool staged() const;
  bool finished() const;

  // What the job threw (null: nothing); only once it has ended.
  std::exception_ptr error() const;
  // Milliseconds from the start to its staging and to its end; only once it has ended.
  double staged_ms() const;
  double finished_ms() const;

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

}  // namespace cohort::detail
