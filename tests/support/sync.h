// Synchronization for tests: a test waits for the event it needs (a count reached, a thread
// blocked), never for a fixed time; every wait has a deadline so that a broken case fails
// instead of hanging.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>

namespace cohort::testing {

// A count that threads raise and wait on: a one-shot flag (wait_for(1)), arrivals in a round
// (wait_for(n)).
class EventCount {
 public:
  void add(int n = 1);
  // True once the count is at least `target`; false at the timeout.
  bool wait_for(int target, std::chrono::milliseconds timeout) const;
  int value() const;

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  int count_ = 0;
};

// The kernel's id of the calling thread (for wait_until_blocked).
pid_t current_thread_id();

// The threads this process runs now (entries of /proc/self/task), or -1 if it cannot say.
int thread_count();

// Waits until the thread `tid` of this process sleeps in the kernel (state S: blocked on a
// futex, a socket, a pipe), or has ended. Nothing in a store, a Work or a socket says "a thread
// is blocked in me", so this polls the thread's state in /proc with a deadline. Call it after
// the thread has announced that it is about to make the blocking call: a thread that sleeps for
// another reason first only makes the test take the unblocked path, never fail wrongly.
// Returns false at the timeout.
bool wait_until_blocked(pid_t tid, std::chrono::milliseconds timeout);

// A call run on its own thread, for tests of a call that must block until another thread acts:
//   BackgroundCall<std::string> get([&] { return store.get_string("k", 10s); });
//   ASSERT_TRUE(get.wait_until_blocked(10s));  // now the get waits for the key
//   store.set("k", "v");
//   ASSERT_EQ(get.result().wait_for(10s), std::future_status::ready);
// Destruction waits for the call to return (give it a deadline of its own).
template <typename T>
class BackgroundCall {
 public:
  explicit BackgroundCall(std::function<T()> call)
      : result_(std::async(std::launch::async, [this, call = std::move(call)] {
          tid_.set_value(current_thread_id());
          return call();
        })) {}

  // True once the call sleeps in the kernel or has returned; false at the timeout.
  bool wait_until_blocked(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    if (tid_future_.wait_until(deadline) != std::future_status::ready) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return testing::wait_until_blocked(tid_future_.get(), std::max(left, decltype(left){0}));
  }
  std::future<T>& result() { return result_; }

 private:
  std::promise<pid_t> tid_;
  std::shared_future<pid_t> tid_future_ = tid_.get_future().share();
  std::future<T> result_;  // last: its thread uses the members above
};

}  // namespace cohort::testing
