#include "cohort/comm/memory_store.h"

#include "cohort/core/check.h"
#include "cohort/core/error.h"
#include "rendezvous/store_table.h"

namespace cohort {

namespace {
std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + ("'" + k + "'");
  return out;
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
  std::unique_lock<std::mutex> lock(mutex_);
  const auto missing = wait_locked(lock, {key}, Deadline::after(timeout));
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
    value = add_to_counter(key, it == table_.end() ? nullptr : &it->second, delta);
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
  std::unique_lock<std::mutex> lock(mutex_);
  const auto missing = wait_locked(lock, keys, Deadline::after(timeout));
  if (!missing.empty()) {
    throw TimeoutError("store wait timed out after " + std::to_string(timeout.count()) +
                       " ms; keys never set: " + join_keys(missing));
  }
}

std::vector<std::string> MemoryStore::wait_locked(std::unique_lock<std::mutex>& lock,
                                                  const std::vector<std::string>& keys,
                                                  Deadline deadline) {
  std::vector<std::string> missing;
  for (;;) {
    check_open();
    missing.clear();
    for (const auto& k : keys) {
      if (!table_.count(k)) missing.push_back(k);
    }
    if (missing.empty() || deadline.expired()) return missing;
    changed_.wait_until(lock, deadline.at());
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
