// A Store in this process's memory: for ranks that are threads, and for tests.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>

#include "cohort/comm/store.h"

namespace cohort {

class MemoryStore : public Store {
 public:
  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  // Wakes every blocked get/wait with a StoreError; later calls fail the same way.
  void shutdown();

 private:
  // Waits (lock held) until all keys exist; returns the missing ones at the deadline.
  std::vector<std::string> wait_locked(std::unique_lock<std::mutex>& lock,
                                       const std::vector<std::string>& keys, Deadline deadline);
  void check_open() const;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> table_;
  bool shut_down_ = false;
};

}  // namespace cohort
