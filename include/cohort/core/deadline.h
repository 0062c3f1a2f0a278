// A point in time by which a blocking call must return. Every wait in cohort takes one.
#pragma once

#include <chrono>

namespace cohort {

using Clock = std::chrono::steady_clock;
using Milliseconds = std::chrono::milliseconds;

class Deadline {
 public:
  // Saturates: a timeout too large to add to now() means never.
  static Deadline after(Milliseconds timeout) {
    const auto now = Clock::now();
    const auto room = std::chrono::duration_cast<Milliseconds>(Clock::time_point::max() - now);
    return timeout >= room ? never() : Deadline(now + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  Clock::time_point at() const { return at_; }
  bool expired() const { return Clock::now() >= at_; }
  // Time left, never negative; capped so it can be handed to poll() and condition variables.
  Milliseconds remaining() const {
    if (at_ == Clock::time_point::max()) return Milliseconds(24LL * 3600 * 1000);
    const auto left = std::chrono::duration_cast<Milliseconds>(at_ - Clock::now());
    return left.count() > 0 ? left : Milliseconds(0);
  }
  // The earlier of two deadlines.
  Deadline min(const Deadline& other) const { return at_ <= other.at_ ? *this : other; }

 private:
  Clock::time_point at_;
};

}  // namespace cohort
