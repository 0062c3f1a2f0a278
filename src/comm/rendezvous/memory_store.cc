#include "cohort/comm/memory_store.h"

#include "cohort/core/check.h"
#include "cohort/core/error.h"

namespace cohort {

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + ("'" + k + "'");
  return out;
}

int64_t parse_counter(const std::string& key, const Bytes& value) {
  try {
    size_t used = 0;
    const std::string text = to_string(value);
    const int64_t v = std::stoll(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw InvalidArgument("store key '" + key + "' holds '" + to_string(value) +
                        "', which is not an integer counter, so add() cannot update it");
}
}  // namespace

void MemoryStore::check_open() const {
  if (shut_down_) throw StoreError("the store has been shut down");
}

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_open();
    table_[key] = value;
  }
  changed_.notify_all();
}

Bytes MemoryStore::get(const std::string& key, Milliseconds timeout) {
  return get(key, timeout, WaitCheck{Milliseconds(0), nullptr});
}

Bytes MemoryStore::get(const std::string& key, Milliseconds timeout, const WaitCheck& check) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto missing = wait_locked(lock, {key}, Deadline::after(timeout), &check);
  if (!missing.empty()) {
    throw TimeoutError("store get('" + key + "') timed out after " +
                       std::to_string(timeout.count()) + " ms: the key was never set");
  }
  return table_.at(key);
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_open();
    auto it = table_.find(key);
    const int64_t current = it == table_.end() ? 0 : parse_counter(key, it->second);
    if (__builtin_add_overflow(current, delta, &value)) {
      throw InvalidArgument("store add('" + key + "', " + std::to_string(delta) +
                            ") overflows the counter, which holds " + std::to_string(current));
    }
    table_[key] = to_bytes(std::to_string(value));
  }
  changed_.notify_all();
  return value;
}

Bytes MemoryStore::compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  Bytes result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check_open();
    auto it = table_.find(key);
    const bool matches = (it == table_.end()) ? expected.empty() : it->second == expected;
    if (matches) table_[key] = desired;
    result = table_.count(key) ? table_[key] : Bytes{};
  }
  changed_.notify_all();
  return result;
}

void MemoryStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  wait(keys, timeout, WaitCheck{Milliseconds(0), nullptr});
}

void MemoryStore::wait(const std::vector<std::string>& keys, Milliseconds timeout,
                       const WaitCheck& check) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto missing = wait_locked(lock, keys, Deadline::after(timeout), &check);
  if (!missing.empty()) {
    throw TimeoutError("store wait timed out after " + std::to_string(timeout.count()) +
                       " ms; keys never set: " + join_keys(missing));
  }
}

std::vector<std::string> MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock,
                                                  const std::vector<std::string>& keys,
                                                  Deadline deadline, const WaitCheck* check) {
  const bool checked = check != nullptr && check->run && check->interval.count() > 0;
  // Its own clock: sets of other keys wake this wait often, and must not postpone the check.
  Deadline next_check = checked ? Deadline::after(check->interval) : Deadline::never();
  std::vector<std::string> missing;
  for (;;) {
    check_open();
    missing.clear();
    for (const auto& k : keys) {
      if (!table_.count(k)) missing.push_back(k);
    }
    if (missing.empty() || deadline.expired()) return missing;
    changed_.wait_until(lock, deadline.min(next_check).at());
    if (checked && next_check.expired()) {
      lock.unlock();  // the check may make a system call; nobody else must wait on it
      check->run();
      lock.lock();
      next_check = Deadline::after(check->interval);
    }
  }
}

bool MemoryStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  return table_.erase(key) > 0;
}

int64_t MemoryStore::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  check_open();
  return static_cast<int64_t>(table_.size());
}

void MemoryStore::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shut_down_ = true;
  }
  changed_.notify_all();
}

}  // namespace cohort
