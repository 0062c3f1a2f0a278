#include "group/stall_watcher.h"

#include <unistd.h>

namespace cohort {

std::shared_ptr<StallWatcher> StallWatcher::shared() {
  // Note [One stall watcher]: a weak reference, so the watcher lives exactly as long as the
  // groups that use it.
  static std::mutex mutex;
  static std::weak_ptr<StallWatcher> current;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (owner != ::getpid()) {
    // A new process, or a forked child: the parent's watcher has no thread here.
    current.reset();
    owner = ::getpid();
  }
  auto watcher = current.lock();
  if (!watcher) {
    watcher = std::make_shared<StallWatcher>();
    current = watcher;
  }
  return watcher;
}

StallWatcher::StallWatcher() {
  thread_ = std::thread([this] { loop(); });
}

StallWatcher::~StallWatcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t StallWatcher::add(Milliseconds period, std::function<void()> tick) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    entries_.emplace(id, Entry{period, Clock::now() + period, std::move(tick)});
  }
  wake_.notify_all();  // the new deadline may be the earliest
  return id;
}

void StallWatcher::remove(uint64_t id) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [&] { return running_ != id; });
  entries_.erase(id);
}

std::map<uint64_t, StallWatcher::Entry>::iterator StallWatcher::earliest() {
  auto first = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (first == entries_.end() || it->second.due < first->second.due) first = it;
  }
  return first;
}

void StallWatcher::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    const auto next = earliest();
    if (next == entries_.end()) {
      wake_.wait(lock);
      continue;
    }
    // A copy: wait_until reads the deadline again after waking, and a remove() while the lock
    // is released may have freed the entry.
    const Clock::time_point due = next->second.due;
    if (due > Clock::now()) {
      wake_.wait_until(lock, due);
      continue;  // woken early: a new entry, a removal or the end
    }
    Entry& entry = next->second;
    entry.due = Clock::now() + entry.period;
    running_ = next->first;
    lock.unlock();
    entry.tick();  // remove() waits for it, so the entry stays
    lock.lock();
    running_ = 0;
    wake_.notify_all();  // a remove() may wait for this tick
  }
}

}  // namespace cohort
