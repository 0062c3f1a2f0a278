// The key-value table behind the TCP store server, and the counter arithmetic it shares with
// MemoryStore.
//
// The server keeps its table as a plain map rather than a MemoryStore: only the server's one
// thread touches it, so it needs no lock, and a parked GET/WAIT asks "is this key set?" many
// times, which MemoryStore can only answer by blocking or throwing a TimeoutError.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "cohort/comm/store.h"

namespace cohort {

// `current` + `delta` for add(): `current` is the value stored at `key` (null when absent,
// which counts as 0). InvalidArgument when the value is not an integer or the sum overflows.
int64_t add_to_counter(const std::string& key, const Bytes* current, int64_t delta);

class StoreTable {
 public:
  // The value at `key`, or null; valid until the table next changes.
  const Bytes* find(const std::string& key) const;
  bool contains(const std::string& key) const { return table_.count(key) != 0; }
  // The keys of `keys` that are not set, each once, in their first order.
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;

  void set(const std::string& key, Bytes value) { table_[key] = std::move(value); }
  int64_t add(const std::string& key, int64_t delta);
  // Store::compare_set; *wrote says whether `desired` was stored.
  Bytes compare_set(const std::string& key, const Bytes& expected, Bytes desired, bool* wrote);
  bool erase(const std::string& key) { return table_.erase(key) > 0; }
  int64_t size() const { return static_cast<int64_t>(table_.size()); }

 private:
  std::unordered_map<std::string, Bytes> table_;
};

}  // namespace cohort
