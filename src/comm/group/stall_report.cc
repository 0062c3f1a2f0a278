#include "group/stall_report.h"

#include <algorithm>
#include <vector>

#include "cohort/core/error.h"
#include "cohort/core/logging.h"

namespace cohort {

namespace {

std::string stall_key(int rank) {
  return "stalled/" + std::to_string(rank);
}

// A tenth of the timeout: a rank that joined a collective publishes its stall well before
// the first rank to time out reads it (Note [Stall reports]).
Milliseconds period_for(Milliseconds timeout) {
  return std::clamp(timeout / 10, Milliseconds(20), Milliseconds(1000));
}

}  // namespace

StallReporter::StallReporter(std::shared_ptr<Store> store, int rank, int size, Milliseconds timeout)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      period_(period_for(timeout)),
      watcher_(StallWatcher::shared()) {
  watch_id_ = watcher_->add(period_, [this] { tick(); });
}

StallReporter::~StallReporter() {
  watcher_->remove(watch_id_);
}

void StallReporter::tick() {
  const int64_t started = started_.load(std::memory_order_relaxed);
  const int64_t in_flight = started > finished_.load(std::memory_order_relaxed) ? started : -1;
  if (in_flight >= 0 && in_flight == seen_ && published_ != in_flight) {
    publish(in_flight);
  } else if (published_ >= 0 && in_flight != published_) {
    withdraw();
  }
  seen_ = in_flight;
}

void StallReporter::publish(int64_t sequence) {
  try {
    store_->set(stall_key(rank_), std::to_string(sequence));
    published_ = sequence;
  } catch (const std::exception& e) {
    COHORT_LOG(kDebug, "rank ", rank_, ": could not report its stall: ", e.what());
  }
}

void StallReporter::withdraw() {
  try {
    store_->delete_key(stall_key(rank_));
    published_ = -1;
  } catch (const std::exception& e) {
    COHORT_LOG(kDebug, "rank ", rank_, ": could not withdraw its stall report: ", e.what());
  }
}

std::string StallReporter::ranks_behind(uint64_t sequence) {
  std::this_thread::sleep_for(settle());  // the joined ranks' reports land meanwhile
  std::vector<std::string> missing;
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      int64_t stalled_in = -1;
      try {
        stalled_in = std::stoll(to_string(store_->get(stall_key(r), Milliseconds(0))));
      } catch (const TimeoutError&) {
        // no report: the rank is in no collective of this group
      }
      if (stalled_in >= static_cast<int64_t>(sequence)) continue;  // it joined
      missing.push_back(std::to_string(r) +
                        (stalled_in < 0 ? " (in no collective of this group)"
                                        : " (stalled in #" + std::to_string(stalled_in) + ")"));
    }
  } catch (const std::exception& e) {
    return std::string("could not ask the store which ranks joined: ") + e.what();
  }
  if (missing.empty()) return "every rank joined it; a peer is stuck or slow inside it";
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  return "ranks that never joined it: " + list;
}

}  // namespace cohort
