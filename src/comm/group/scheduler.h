// A group's order of operations: the queue, the worker that runs it, the sequence numbers and
// the group's failure (docs/architecture.md, "Threads"). It knows nothing of how an operation
// runs: the group hands it an executor.
//
// Note [Worker on demand]: a group starts its worker thread with its first queued operation.
// Blocking calls (collectives and point-to-point alike) run on the caller's thread whenever
// nothing is queued ahead of them, so a group used only that way (a parameter server's pair
// groups on the server side, a group that only agrees on flags) never starts one: a server of
// 63 workers would otherwise hold 63 idle threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "group/operation.h"

namespace cohort {

class Scheduler {
 public:
  // Runs one operation to its end on the calling thread and returns its error; never throws.
  using Executor = std::function<std::exception_ptr(Operation&)>;
  // A send's or recv's body; gets the message's index in its (peer, tag) stream.
  using P2PBody = std::function<void(algo::Context&, uint64_t)>;

  explicit Scheduler(Executor execute) : execute_(std::move(execute)) {}
  // Queued operations finish (by their deadlines) before the worker stops.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Numbers the collective (issue order) and queues it for the worker.
  std::shared_ptr<Work> submit(Operation op);
  // As submit, then waits; runs on the calling thread when nothing else is queued.
  void run_blocking(Operation op);
  // Queues a send or recv (`op` without its body), numbered in its (peer, tag) stream.
  std::shared_ptr<Work> submit_p2p(Operation op, P2PBody body);
  // As submit_p2p, then waits; runs on the calling thread when nothing else is queued.
  void run_p2p_blocking(Operation op, P2PBody body);

  uint64_t sequence_number() const;
  // Records the group's first failure: every later operation fails with it. False when the
  // group had failed already.
  bool fail(std::exception_ptr error);
  // The first failure, or null.
  std::exception_ptr failure() const;

 private:
  // Queues `op` with a new Work, which it returns; starts the worker if needed (Note [Worker on
  // demand]).
  std::shared_ptr<Work> enqueue_locked(Operation op);
  // A blocking call, numbered: on this thread when nothing is queued or running, else queued
  // behind the rest and waited for. `lock` holds mutex_.
  void run_now_or_after_queue(Operation& op, std::unique_lock<std::mutex>& lock);
  // Runs `op` on this thread; `lock` holds mutex_, nothing is queued and nothing runs.
  void run_inline(Operation& op, std::unique_lock<std::mutex>& lock);
  // Under mutex_: gives `op` its index in its (peer, tag) stream and its body.
  void number_p2p_locked(Operation& op, P2PBody body);
  void worker_loop();
  std::exception_ptr run(Operation& op) noexcept;  // the executor, unless the group failed

  Executor execute_;
  mutable std::mutex mutex_;  // guards everything below
  std::condition_variable queue_cv_;
  std::deque<Operation> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  uint64_t next_sequence_ = 0;
  std::map<std::pair<int, uint64_t>, uint64_t> p2p_send_index_;  // (peer, channel) -> next
  std::map<std::pair<int, uint64_t>, uint64_t> p2p_recv_index_;
  std::exception_ptr failure_;
  std::thread worker_;  // started by the first queued operation (Note [Worker on demand])
};

}  // namespace cohort
